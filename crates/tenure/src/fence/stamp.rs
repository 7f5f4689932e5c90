//! What a holder shows a fenced resource: its fence and the id of its
//! acquisition, so that an equal fence is accepted only from the acquisition
//! that wrote it (a retry), never from another one.

use std::fmt;
use std::str::FromStr;

use super::Fence;

/// The id of one acquisition of a lease: random, drawn the first time its
/// guard is asked for it (and the same ever after), and public (unlike the
/// owner token, it cannot release the lease).
///
/// A fenced resource stores it next to the last accepted fence, and accepts
/// a write with an *equal* fence only when it carries the same id: the same
/// holder retrying. Fences never repeat by design, but this keeps a second
/// holder out even if one did (a store that lost its counter *and* whose clock
/// stepped back). Written as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct AcquisitionId(u128);

impl AcquisitionId {
    /// A fresh random id, drawn as owner tokens are (`random::draw`).
    /// Should the OS generator fail to seed it, rand's thread generator
    /// draws it.
    pub(crate) fn random() -> Self {
        match crate::random::draw() {
            Ok(bytes) => AcquisitionId(u128::from_ne_bytes(bytes)),
            Err(_) => AcquisitionId(rand::random()),
        }
    }

    /// The id as a number.
    pub const fn get(self) -> u128 {
        self.0
    }
}

impl From<u128> for AcquisitionId {
    fn from(value: u128) -> Self {
        AcquisitionId(value)
    }
}

impl fmt::Display for AcquisitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for AcquisitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AcquisitionId({self})")
    }
}

/// An acquisition id that is not 32 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an acquisition id is 32 hex digits, not {0:?}")]
pub struct AcquisitionIdError(String);

/// Parses the 32 hex digits of [`Display`](fmt::Display) (as a holder sends
/// them to a resource in another process).
impl FromStr for AcquisitionId {
    type Err = AcquisitionIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(AcquisitionIdError(s.chars().take(40).collect()));
        }
        u128::from_str_radix(s, 16)
            .map(AcquisitionId)
            .map_err(|_| AcquisitionIdError(s.to_string()))
    }
}

/// A fence with the acquisition it belongs to, as a fenced resource takes it
/// ([`LeaseGuard::stamp`](crate::LeaseGuard::stamp)).
///
/// A bare [`Fence`] converts into a stamp without an acquisition: a resource
/// then accepts only a *greater* fence than the stored one, since an equal
/// one could come from anyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FenceStamp {
    fence: Fence,
    acquisition: Option<AcquisitionId>,
}

impl FenceStamp {
    /// The stamp of `fence` granted to the acquisition `acquisition`.
    pub const fn new(fence: Fence, acquisition: AcquisitionId) -> Self {
        FenceStamp {
            fence,
            acquisition: Some(acquisition),
        }
    }

    /// The fence.
    pub const fn fence(self) -> Fence {
        self.fence
    }

    /// The acquisition, if known.
    pub const fn acquisition(self) -> Option<AcquisitionId> {
        self.acquisition
    }
}

impl From<Fence> for FenceStamp {
    fn from(fence: Fence) -> Self {
        FenceStamp {
            fence,
            acquisition: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquisition_ids_print_and_parse_as_32_hex_digits() {
        let id = AcquisitionId::random();
        let text = id.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(text.parse::<AcquisitionId>(), Ok(id));
        assert_ne!(AcquisitionId::random(), id);
        assert!("xyz".parse::<AcquisitionId>().is_err());
        assert!(
            "+0000000000000000000000000000001"
                .parse::<AcquisitionId>()
                .is_err()
        );
        assert_eq!(AcquisitionId::from(1).to_string(), format!("{:032x}", 1));
    }
}
