//! Changes of a database file made by any process, as the OS reports them:
//! inotify on the file's directory (Linux), filtered to the database and its
//! `-wal` and `-journal` files. A commit writes one of them; a read writes
//! none (WAL readers touch only the memory-mapped `-shm` file, which inotify
//! does not report), so an event means some connection committed.
//!
//! Where inotify is missing or refused (another OS, `fs.inotify.max_user_instances`
//! reached), [`FileEvents::open`] returns `None` and the caller polls.

#[cfg(any(target_os = "linux", target_os = "android"))]
mod imp {
    use std::ffi::OsString;
    use std::os::fd::AsFd;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Weak};

    use nix::errno::Errno;
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    use tokio::sync::Notify;

    /// How often (ms) the reading thread checks that someone still listens.
    const LIVENESS_MS: u16 = 1000;

    /// Between the reading thread and the async side.
    #[derive(Default)]
    struct Shared {
        changed: Notify,
        broken: AtomicBool,
    }

    /// Events of one database file, read by a thread of their own (tokio
    /// registers a raw fd only in unsafe code, which this crate forbids). The
    /// thread ends within a second of this being dropped.
    pub(crate) struct FileEvents {
        shared: Arc<Shared>,
    }

    impl FileEvents {
        pub(crate) fn open(file: &Path) -> Option<FileEvents> {
            let dir = file.parent().filter(|d| !d.as_os_str().is_empty())?;
            let name = file.file_name()?.to_os_string();
            let side = |suffix: &str| {
                let mut n = name.clone();
                n.push(suffix);
                n
            };
            let names = [side("-wal"), side("-journal"), name.clone()];
            let mask = AddWatchFlags::IN_MODIFY
                | AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_DELETE;
            let opened = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
                .and_then(|ino| ino.add_watch(dir, mask).map(|_| ino));
            let ino = match opened {
                Ok(ino) => ino,
                Err(e) => {
                    tracing::debug!(dir = %dir.display(), error = %e, "no inotify; waiters poll");
                    return None;
                }
            };
            let shared = Arc::new(Shared::default());
            let weak = Arc::downgrade(&shared);
            let spawned = std::thread::Builder::new()
                .name("tenure-sqlite-events".into())
                .spawn(move || read(&ino, &names, &weak));
            if let Err(e) = spawned {
                tracing::debug!(error = %e, "cannot start the file-event thread; waiters poll");
                return None;
            }
            Some(FileEvents { shared })
        }

        /// Waits until the database changed (or the kernel dropped events,
        /// which may have hidden a change). `Err` when inotify broke: the
        /// caller polls from then on.
        pub(crate) async fn changed(&mut self) -> std::io::Result<()> {
            self.shared.changed.notified().await;
            if self.shared.broken.load(Ordering::Acquire) {
                return Err(std::io::Error::other("reading inotify events failed"));
            }
            Ok(())
        }
    }

    /// The reading thread: until nobody listens, reports each burst of
    /// relevant events as one change.
    fn read(ino: &Inotify, names: &[OsString; 3], listener: &Weak<Shared>) {
        loop {
            let mut fds = [PollFd::new(ino.as_fd(), PollFlags::POLLIN)];
            let ready = poll(&mut fds, PollTimeout::from(LIVENESS_MS));
            let Some(shared) = listener.upgrade() else {
                return;
            };
            let relevant = match ready {
                Ok(0) | Err(Errno::EINTR) => false,
                Ok(_) => match drain(ino, names) {
                    Ok(relevant) => relevant,
                    Err(e) => {
                        tracing::debug!(error = %e, "reading inotify events failed");
                        shared.broken.store(true, Ordering::Release);
                        shared.changed.notify_one();
                        return;
                    }
                },
                Err(e) => {
                    tracing::debug!(error = %e, "waiting for inotify events failed");
                    shared.broken.store(true, Ordering::Release);
                    shared.changed.notify_one();
                    return;
                }
            };
            if relevant {
                // Stored when nobody awaits it yet: changes are never lost,
                // and a burst is one wake-up.
                shared.changed.notify_one();
            }
        }
    }

    /// Reads what is queued; whether any of it concerns the database.
    fn drain(ino: &Inotify, names: &[OsString; 3]) -> nix::Result<bool> {
        let mut relevant = false;
        loop {
            match ino.read_events() {
                Ok(events) => {
                    relevant |= events.iter().any(|e| {
                        e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                            || e.name.as_ref().is_some_and(|n| names.contains(n))
                    });
                }
                Err(Errno::EAGAIN) => return Ok(relevant),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod imp {
    use std::path::Path;

    /// No file events on this OS: the caller polls.
    pub(crate) struct FileEvents;

    impl FileEvents {
        pub(crate) fn open(_file: &Path) -> Option<FileEvents> {
            None
        }

        pub(crate) async fn changed(&mut self) -> std::io::Result<()> {
            std::future::pending().await
        }
    }
}

pub(crate) use imp::FileEvents;
