//! Random bytes for owner tokens and acquisition ids: the operating
//! system's generator for a thread's first few draws, then a per-thread
//! generator seeded by it, seeded again in a forked child.

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use crate::error::{Error, Result};

/// Draws one generator makes before it is seeded again from the OS.
const DRAWS_PER_SEED: u32 = 4096;

/// Draws a thread takes straight from the OS before it seeds a generator.
/// A one-shot process (`tenure run`) draws a few tokens only, and a
/// generator's first draw asks the CPU which instructions it has (ChaCha's
/// vector code is chosen at run time): eight `CPUID`s, which a virtual
/// machine traps, cost such a process about 80 µs, more than its dozens of
/// system calls to the OS generator would.
const OS_DRAWS: u32 = 16;

/// A thread's generator: ChaCha12 seeded by the OS. Not rand's
/// `ThreadRng` or `ReseedingRng`: both panic when the OS cannot seed them
/// (here that is `Error::Rng`), and neither is seeded again in a forked
/// child.
#[cfg_attr(test, derive(Clone))]
struct Generator {
    left: u32,
    rng: StdRng,
}

impl Generator {
    fn seeded() -> Result<Self> {
        Ok(Generator {
            left: DRAWS_PER_SEED,
            rng: StdRng::from_seed(from_os()?),
        })
    }

    /// 16 bytes from `generator`, seeded again first when it is missing,
    /// used up, or `forked`: a child forked from this process inherits the
    /// generator's state and would otherwise draw the same tokens as its
    /// parent.
    fn draw(generator: &mut Option<Generator>, forked: bool) -> Result<[u8; 16]> {
        let g = match generator {
            Some(g) if !forked && g.left > 0 => g,
            _ => generator.insert(Generator::seeded()?),
        };
        g.left -= 1;
        let mut bytes = [0u8; 16];
        g.rng.fill_bytes(&mut bytes);
        Ok(bytes)
    }
}

/// `N` bytes from the OS generator.
fn from_os<const N: usize>() -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| Error::Rng { cause: e.into() })?;
    Ok(bytes)
}

/// What a thread draws from: the OS for its first [`OS_DRAWS`], then its
/// generator, and what tells it that the process forked since its last draw.
struct Source {
    os_left: u32,
    generator: Option<Generator>,
    fork: Option<forkguard::Guard>,
}

impl Source {
    const fn new() -> Self {
        Source {
            os_left: OS_DRAWS,
            generator: None,
            fork: None,
        }
    }

    fn draw(&mut self) -> Result<[u8; 16]> {
        if self.os_left > 0 {
            self.os_left -= 1;
            return from_os();
        }
        match self.forked() {
            Some(forked) => Generator::draw(&mut self.generator, forked),
            // No fork handler: a generator could repeat its parent's draws
            // in a forked child, so the OS draws instead.
            None => from_os(),
        }
    }

    /// Whether the process forked since this thread's last draw; `None`
    /// when no fork handler could be registered (`pthread_atfork` failed).
    /// The first call registers it (once per process), before the
    /// generator is seeded, so no fork can fall between the two.
    fn forked(&mut self) -> Option<bool> {
        if let Some(fork) = &mut self.fork {
            return Some(fork.detected_fork());
        }
        self.fork = Some(forkguard::Guard::try_new().ok()?);
        Some(false)
    }
}

thread_local! {
    static SOURCE: RefCell<Source> = const { RefCell::new(Source::new()) };
}

/// 16 random bytes: from the OS RNG for a thread's first 16 draws, then
/// from the thread's generator (ChaCha12, a cryptographically secure
/// generator, seeded from the OS RNG every 4096 draws and in every new
/// process). A lease's owner token and its acquisition id are drawn here: a
/// system call to the OS RNG for each was about 4 % of a Redis lease
/// client's CPU time per acquire + release, and a `getpid` to notice a fork
/// 1–2 %; a fork handler's counter, read with one atomic load, is what
/// remains.
pub(crate) fn draw() -> Result<[u8; 16]> {
    SOURCE
        .try_with(|s| s.borrow_mut().draw())
        .unwrap_or_else(|_| Source::new().draw())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generator_inherited_by_another_process_is_seeded_again() {
        let mut parent = Some(Generator::seeded().expect("rng"));
        // What a forked child would hold: the parent's state, bit for bit.
        let mut child = parent.clone();
        let from_parent = Generator::draw(&mut parent, false).expect("rng");
        assert_eq!(
            Generator::draw(&mut child.clone(), false).ok(),
            Some(from_parent)
        );
        assert_ne!(Generator::draw(&mut child, true).ok(), Some(from_parent));
    }

    #[test]
    fn a_thread_draws_from_the_os_before_it_seeds_a_generator() {
        let mut source = Source::new();
        let mut drawn = std::collections::HashSet::new();
        for _ in 0..OS_DRAWS {
            assert!(drawn.insert(source.draw().expect("rng")));
            assert!(source.generator.is_none());
        }
        assert!(drawn.insert(source.draw().expect("rng")));
        assert!(source.generator.is_some());
        // Watching for a fork from then on, and not seeding again without one.
        assert!(source.fork.is_some());
        assert!(drawn.insert(source.draw().expect("rng")));
        assert_eq!(
            source.generator.as_ref().map(|g| g.left),
            Some(DRAWS_PER_SEED - 2)
        );
    }

    #[test]
    fn a_used_up_generator_is_seeded_again() {
        let mut g = Some(Generator::seeded().expect("rng"));
        let mut copy = g.clone();
        if let Some(g) = g.as_mut() {
            g.left = 0;
        }
        let fresh = Generator::draw(&mut g, false).expect("rng");
        assert_ne!(Generator::draw(&mut copy, false).ok(), Some(fresh));
        assert_eq!(g.map(|g| g.left), Some(DRAWS_PER_SEED - 1));
    }
}
