//! Which process owns a RUNNING run, and whether that process still exists.
//!
//! A run row carries its writer's pid and, where the platform tells it, a start token
//! (`<boot id>:<pid namespace>:<start time in clock ticks>` on Linux). A pid alone is not
//! enough: pids are reused, so a run whose owner died long ago could look alive because an
//! unrelated process now has that pid; the start time tells the two apart. [`is_alive`]
//! answers for the rows whose owner this kernel can see (the crate root decides when that
//! is, and falls back on the lease otherwise): a token from another boot means the owner is
//! gone; a token from another pid namespace (a container sharing the store) names a process
//! this one cannot see, so it counts as alive.
//!
//! When liveness cannot be decided (no `/proc`, no permission), the owner counts as alive:
//! sweeping a live run would corrupt its lifecycle, while leaving a dead one RUNNING a little
//! longer costs nothing.

use crate::Owner;

/// Whether the process that wrote `pid` and `token` on a run row still runs.
pub fn is_alive(pid: i64, token: Option<&str>) -> bool {
    let Ok(pid) = u32::try_from(pid) else {
        return false;
    };
    if pid == 0 {
        return false;
    }
    let me = Owner::current();
    if pid == me.pid && token == me.token.as_deref() {
        return true;
    }
    platform::is_alive(pid, token)
}

#[cfg(target_os = "linux")]
pub(crate) fn start_token(pid: u32) -> Option<String> {
    let (_, start) = platform::stat(pid).ok()??;
    Some(format!(
        "{}:{}:{start}",
        platform::boot_id()?,
        platform::pid_namespace()?
    ))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn start_token(_pid: u32) -> Option<String> {
    None
}

#[cfg(target_os = "linux")]
pub(crate) mod platform {
    use std::io::ErrorKind;

    pub fn boot_id() -> Option<String> {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(id.trim().to_string())
    }

    /// The inode of this process's pid namespace (`pid:[4026531836]` → `4026531836`).
    pub fn pid_namespace() -> Option<String> {
        let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
        let link = link.to_str()?;
        let inode = link.strip_prefix("pid:[")?.strip_suffix(']')?;
        Some(inode.to_string())
    }

    /// `(state, start time)` of a process, `Ok(None)` when `/proc` does not know it.
    pub fn stat(pid: u32) -> std::io::Result<Option<(char, u64)>> {
        let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // The command name (field 2) may hold spaces and parentheses; it ends at the last ')'.
        let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else {
            return Ok(None);
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = fields.first().and_then(|s| s.chars().next());
        // Field 22 of stat(5) is the start time; `fields` begins at field 3.
        let start = fields.get(19).and_then(|s| s.parse().ok());
        Ok(state.zip(start))
    }

    pub fn is_alive(pid: u32, token: Option<&str>) -> bool {
        let owner = token.and_then(|t| {
            let mut parts = t.splitn(3, ':');
            Some((
                parts.next()?,
                parts.next()?,
                parts.next()?.parse::<u64>().ok()?,
            ))
        });
        if let Some((boot, namespace, _)) = owner {
            if boot_id().is_some_and(|b| b != boot) {
                return false;
            }
            if pid_namespace().is_some_and(|ns| ns != namespace) {
                return true;
            }
        }
        let (state, start) = match stat(pid) {
            Ok(Some(s)) => s,
            Ok(None) => return false,
            Err(_) => return true,
        };
        // A zombie has exited; it only waits for its parent to collect the status.
        if matches!(state, 'Z' | 'X') {
            return false;
        }
        owner.is_none_or(|(_, _, owner_start)| owner_start == start)
    }
}

#[cfg(all(unix, not(target_os = "linux")))]
mod platform {
    pub fn is_alive(pid: u32, _token: Option<&str>) -> bool {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // Signal 0 checks existence and permission without delivering anything. pid > 0 is
        // guaranteed by the caller, so this never addresses a process group.
        // SAFETY: kill with signal 0 has no side effect on the target.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
}

#[cfg(not(unix))]
mod platform {
    pub fn is_alive(_pid: u32, _token: Option<&str>) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_no_pid_is_not() {
        let me = Owner::current();
        assert!(is_alive(i64::from(me.pid), me.token.as_deref()));
        assert!(!is_alive(0, None));
        assert!(!is_alive(-1, None));
        assert!(!is_alive(i64::from(u32::MAX) + 1, None));
    }

    /// A child that has exited but is not yet reaped is a zombie: it no longer runs, and its
    /// pid cannot be reused while it stays unreaped, so the answer cannot depend on what else
    /// the machine is starting (a reaped child's pid may already belong to another process).
    #[cfg(target_os = "linux")]
    #[test]
    fn an_exited_child_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let token = start_token(pid);
        // Wait for the exit itself (a condition), bounded so a broken /proc fails the test.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !matches!(platform::stat(pid), Ok(Some(('Z', _)))) {
            assert!(
                std::time::Instant::now() < deadline,
                "child {pid} never exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!is_alive(i64::from(pid), None));
        assert!(!is_alive(i64::from(pid), token.as_deref()));
        child.wait().unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_start_token_tells_a_reused_pid_and_other_boots_and_namespaces_apart() {
        let me = Owner::current();
        let token = me.token.clone().expect("Linux has a start token");
        let (prefix, start) = token.rsplit_once(':').unwrap();
        let (boot, namespace) = prefix.split_once(':').unwrap();
        let pid = i64::from(me.pid);
        let earlier = format!("{prefix}:{}", start.parse::<u64>().unwrap() + 1);
        assert!(!is_alive(pid, Some(&earlier)), "same pid, another process");
        assert!(!is_alive(
            pid,
            Some(&format!("another-boot:{namespace}:{start}"))
        ));
        assert!(
            is_alive(pid, Some(&format!("{boot}:1:{start}"))),
            "another pid namespace cannot be checked, so it counts as alive"
        );
        assert!(is_alive(pid, Some("unparseable")), "falls back to the pid");
    }
}
