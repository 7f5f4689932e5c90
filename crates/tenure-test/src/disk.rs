//! A disk of its own for one server: an ext4 filesystem in a file, mounted
//! through a loop device, that can be frozen (`fsfreeze`) — every write and
//! fsync to it then blocks until it is thawed, as on a stalled disk.
//!
//! Needs root, loop devices and `losetup`, `mkfs.ext4`, `mount`, `fsfreeze`;
//! [`LoopDisk::create`] says why not when one is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted ext4 image; unmounted (thawed first) and removed on drop.
#[derive(Debug)]
pub(crate) struct LoopDisk {
    image: PathBuf,
    device: String,
    mount: PathBuf,
    frozen: bool,
}

/// Runs `program args`, returning its standard output, or why it failed.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl LoopDisk {
    /// Creates a sparse image of `mb` MiB at `image`, formats it and mounts it
    /// at `mount` (created).
    pub(crate) fn create(image: &Path, mount: &Path, mb: u64) -> Result<LoopDisk, String> {
        let file = std::fs::File::create(image).map_err(|e| e.to_string())?;
        file.set_len(mb << 20).map_err(|e| e.to_string())?;
        drop(file);
        let img = image.to_string_lossy().into_owned();
        let device = match run("losetup", &["-f", "--show", &img]) {
            Ok(d) => d,
            Err(e) => {
                let _ = std::fs::remove_file(image);
                return Err(e);
            }
        };
        let disk = LoopDisk {
            image: image.to_path_buf(),
            device,
            mount: mount.to_path_buf(),
            frozen: false,
        };
        run("mkfs.ext4", &["-q", &disk.device])?;
        std::fs::create_dir_all(mount).map_err(|e| e.to_string())?;
        run("mount", &[&disk.device, &mount.to_string_lossy()])?;
        Ok(disk)
    }

    /// Where the filesystem is mounted.
    pub(crate) fn path(&self) -> &Path {
        &self.mount
    }

    /// Freezes the filesystem: writers block (uninterruptibly) until [`thaw`](Self::thaw).
    pub(crate) fn freeze(&mut self) -> Result<(), String> {
        run("fsfreeze", &["-f", &self.mount.to_string_lossy()])?;
        self.frozen = true;
        Ok(())
    }

    /// Thaws the filesystem after [`freeze`](Self::freeze).
    pub(crate) fn thaw(&mut self) {
        if self.frozen {
            let _ = run("fsfreeze", &["-u", &self.mount.to_string_lossy()]);
            self.frozen = false;
        }
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        self.thaw();
        let mount = self.mount.to_string_lossy().into_owned();
        // A process still dying may keep it busy for a moment.
        for _ in 0..20 {
            if run("umount", &[&mount]).is_ok() || !is_mounted(&self.mount) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = run("losetup", &["-d", &self.device]);
        let _ = std::fs::remove_file(&self.image);
    }
}

fn is_mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .is_ok_and(|m| m.lines().any(|l| l.split(' ').nth(1) == path.to_str()))
}
