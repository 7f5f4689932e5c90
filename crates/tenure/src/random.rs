//! Random bytes for owner tokens and acquisition ids: a per-thread
//! generator seeded by the operating system, seeded again in a forked child.

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use crate::error::{Error, Result};

/// Draws one generator makes before it is seeded again from the OS.
const DRAWS_PER_SEED: u32 = 4096;

/// A thread's generator: ChaCha12 seeded by the OS, and the process it
/// was seeded in. Not rand's `ThreadRng` or `ReseedingRng`: both panic when
/// the OS cannot seed them (here that is `Error::Rng`), and neither is
/// seeded again in a forked child.
#[cfg_attr(test, derive(Clone))]
struct Generator {
    pid: u32,
    left: u32,
    rng: StdRng,
}

impl Generator {
    fn seeded(pid: u32) -> Result<Self> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| Error::Rng { cause: e.into() })?;
        Ok(Generator {
            pid,
            left: DRAWS_PER_SEED,
            rng: StdRng::from_seed(seed),
        })
    }

    /// 16 bytes from `generator`, seeded again first when it is missing,
    /// used up, or was seeded in another process than `pid`: a child forked
    /// from this one inherits the generator's state and would otherwise draw
    /// the same tokens as its parent.
    fn draw(generator: &mut Option<Generator>, pid: u32) -> Result<[u8; 16]> {
        let g = match generator {
            Some(g) if g.pid == pid && g.left > 0 => g,
            _ => generator.insert(Generator::seeded(pid)?),
        };
        g.left -= 1;
        let mut bytes = [0u8; 16];
        g.rng.fill_bytes(&mut bytes);
        Ok(bytes)
    }
}

thread_local! {
    static GENERATOR: RefCell<Option<Generator>> = const { RefCell::new(None) };
}

/// 16 random bytes from this thread's generator (ChaCha12, a
/// cryptographically secure generator, seeded from the OS RNG every 4096
/// draws and in every new process). A lease's owner token and its
/// acquisition id are drawn here: a system call to the OS RNG for each was
/// about 4 % of a Redis lease client's CPU time per acquire + release; a
/// check of the process id (a cheaper system call) is what remains.
pub(crate) fn draw() -> Result<[u8; 16]> {
    let pid = std::process::id();
    GENERATOR
        .try_with(|g| Generator::draw(&mut g.borrow_mut(), pid))
        .unwrap_or_else(|_| Generator::draw(&mut None, pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generator_inherited_by_another_process_is_seeded_again() {
        let mut parent = Some(Generator::seeded(1).expect("rng"));
        // What a forked child would hold: the parent's state, bit for bit.
        let mut child = parent.clone();
        let from_parent = Generator::draw(&mut parent, 1).expect("rng");
        assert_eq!(
            Generator::draw(&mut child.clone(), 1).ok(),
            Some(from_parent)
        );
        assert_ne!(Generator::draw(&mut child, 2).ok(), Some(from_parent));
    }

    #[test]
    fn a_used_up_generator_is_seeded_again() {
        let mut g = Some(Generator::seeded(1).expect("rng"));
        let mut copy = g.clone();
        if let Some(g) = g.as_mut() {
            g.left = 0;
        }
        let fresh = Generator::draw(&mut g, 1).expect("rng");
        assert_ne!(Generator::draw(&mut copy, 1).ok(), Some(fresh));
        assert_eq!(g.map(|g| g.left), Some(DRAWS_PER_SEED - 1));
    }
}
