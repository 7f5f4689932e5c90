//! What a holder shows a fenced resource: its fence and the id of its
//! acquisition, so that an equal fence is accepted only from the acquisition
//! that wrote it (a retry), never from another one.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};

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
    /// Should the OS generator fail, the id is made of the wall clock, the
    /// process id and a count instead ([`unique`]): an id is public, so it
    /// must be unique, not secret, and asking for one must not panic (rand's
    /// thread generator would, with the OS generator down).
    pub(crate) fn random() -> Self {
        match crate::random::draw() {
            Ok(bytes) => AcquisitionId(u128::from_ne_bytes(bytes)),
            Err(_) => AcquisitionId(unique(super::floor::wall_clock_us())),
        }
    }

    /// The id as a number.
    pub const fn get(self) -> u128 {
        self.0
    }
}

/// An id without the OS generator: `now_us` (the wall clock), this
/// process's id and how many such ids it made before. Unique within the
/// process (the count, whatever the clock does), and across processes
/// unless two with the same id make one in the same microsecond.
fn unique(now_us: u64) -> u128 {
    static MADE: AtomicU32 = AtomicU32::new(0);
    let made = MADE.fetch_add(1, Ordering::Relaxed);
    (u128::from(now_us) << 64) | (u128::from(std::process::id()) << 32) | u128::from(made)
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
    fn ids_made_without_the_os_generator_never_repeat_even_at_one_instant() {
        let ids: std::collections::HashSet<u128> = (0..10_000).map(|_| unique(7)).collect();
        assert_eq!(ids.len(), 10_000);
        assert_eq!(unique(7) >> 64, 7, "the clock is part of the id");
    }

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
