//! Waiting on child processes with a deadline: a command that hangs fails its test, naming
//! the command, instead of stalling the whole suite.

use crate::OrFail;
use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long any one command of the tests may take: generous, a hang is far longer.
pub const LIMIT: Duration = Duration::from_secs(60);

/// `program arg …` of a command, for messages.
pub fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Like `Command::output` (stdin empty unless the command sets it, stdout and stderr
/// captured), but the child is killed and the test fails after `limit`.
#[track_caller]
pub fn output(cmd: &mut Command, limit: Duration) -> Output {
    let what = describe(cmd);
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("`{what}` cannot start: {e}"));
    wait_with_output(child, limit, &what)
}

/// Like `Child::wait_with_output`, but the child is killed and the test fails after `limit`.
#[track_caller]
pub fn wait_with_output(mut child: Child, limit: Duration, what: &str) -> Output {
    // Pipes are drained while waiting, so a child that writes much never blocks on them.
    fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<Vec<u8>> {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`{what}` did not finish within {limit:?} and was killed");
            }
            Ok(None) => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => panic!("waiting on `{what}`: {e}"),
        }
    };
    Output {
        status,
        stdout: stdout.join().or_fail("stdout reader"),
        stderr: stderr.join().or_fail("stderr reader"),
    }
}

/// Polls `ready` until it returns a value, failing the test if `child` ends first or nothing
/// comes within [`LIMIT`]. For states a running `diag` reaches and then stays in (a run
/// stored, a model call the server holds), never for a race.
#[track_caller]
pub fn poll_child<T>(what: &str, child: &mut Child, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(v) = ready() {
            return v;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the child ended ({status}) while waiting for {what}");
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}
