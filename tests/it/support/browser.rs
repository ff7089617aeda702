//! Headless Chromium (Debian's `chromium`, installed by `scripts/install-peers`) driven over
//! the DevTools protocol: load a page from a file URL with networking disabled, and report
//! every request it made, every console error, what a few DOM queries found and a
//! screenshot. A missing `chromium` fails the test that asked for it.
//!
//! Every wait is for a condition (the DevTools port file, a protocol answer, the load event)
//! with a generous bound, never a fixed sleep that lets something happen.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// How long any one wait may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(90);

/// The `chromium` binary, or a failure naming how to install it.
pub fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("chromium");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "chromium is not installed: scripts/install-peers installs it (apt-get install \
         --no-install-recommends chromium); the browser tests never skip"
    );
}

/// What one page load showed.
#[derive(Debug)]
pub struct PageReport {
    /// Every request the page started, the document itself included.
    pub requests: Vec<String>,
    /// Console errors, uncaught exceptions and error log entries (CSP violations among them).
    pub errors: Vec<String>,
    /// The result of the DOM checks (see [`CHECKS`]).
    pub dom: Value,
    /// The page as a PNG.
    pub screenshot: Vec<u8>,
}

/// DOM queries run in the loaded page (DevTools evaluation is not subject to the page's
/// Content-Security-Policy): in-page links and whether their targets exist, scripts,
/// images, event-handler attributes, `javascript:` URLs, and a flag a hostile script would
/// have set.
pub const CHECKS: &str = r##"JSON.stringify((() => {
  const links = [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href'));
  const all = [...document.querySelectorAll('*')];
  const urls = all.flatMap(e => [...e.attributes]
      .filter(a => ['href', 'src', 'action', 'formaction', 'xlink:href', 'srcset', 'poster', 'data'].includes(a.name))
      .map(a => a.value));
  const fetched = all.filter(e => e.tagName.toLowerCase() !== 'a').flatMap(e => [...e.attributes]
      .filter(a => ['href', 'src', 'xlink:href', 'srcset', 'poster', 'data'].includes(a.name))
      .map(a => e.tagName.toLowerCase() + ' ' + a.value));
  return {
    cites: [...document.querySelectorAll('a.cite')].map(a => a.getAttribute('href')),
    links: links,
    dangling: links.filter(h => !document.getElementById(decodeURIComponent(h.slice(1)))),
    scripts: document.scripts.length,
    images: document.images.length,
    iframes: document.querySelectorAll('iframe, object, embed, form, input:not([type=checkbox]), base').length,
    handlers: all.flatMap(e => [...e.attributes].filter(a => a.name.toLowerCase().startsWith('on')).map(a => e.tagName + ' ' + a.name)),
    javascript_urls: urls.filter(u => u.replace(/[\s\u0000-\u001f]/g, '').toLowerCase().startsWith('javascript:')),
    fetched: fetched,
    remote_links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')).filter(h => !h.startsWith('#')),
    pwned: window.__pwned === true || document.title.includes('pwned'),
    text_chars: document.body ? document.body.innerText.length : 0,
    title: document.title,
    section_text: Object.fromEntries([...document.querySelectorAll('section[id]')]
        .map(e => [e.id, e.textContent])),
    ids: all.filter(e => e.id).map(e => e.id),
  };
})())"##;

struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn launch() -> (Browser, String) {
    let profile = tempfile::Builder::new()
        .prefix("diag-chromium-")
        .tempdir()
        .expect("profile dir");
    let child = Command::new(chromium())
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--window-size=1280,900",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut browser = Browser {
        child,
        _profile: profile,
    };
    // Chromium writes the port it chose and the browser's WebSocket path to this file.
    let port_file = browser._profile.path().join("DevToolsActivePort");
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&port_file) {
            let mut lines = text.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                if !port.is_empty() && path.starts_with("/devtools/") {
                    return (browser, format!("ws://127.0.0.1:{port}{path}"));
                }
            }
        }
        if let Ok(Some(status)) = browser.child.try_wait() {
            panic!("chromium exited before it listened: {status}");
        }
        assert!(
            started.elapsed() < BOUND,
            "chromium did not open its DevTools port within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

struct Cdp {
    ws: Ws,
    next_id: u64,
    /// Events received so far: (session, method, params).
    events: Vec<(Option<String>, String, Value)>,
}

impl Cdp {
    async fn read(&mut self) -> Value {
        loop {
            let msg = tokio::time::timeout(BOUND, self.ws.next())
                .await
                .expect("DevTools did not answer in time")
                .expect("DevTools connection closed")
                .expect("DevTools read");
            if let Message::Text(text) = msg {
                return serde_json::from_str(&text).expect("DevTools JSON");
            }
        }
    }

    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::Text(msg.to_string().into()))
            .await
            .expect("DevTools send");
        loop {
            let v = self.read().await;
            if v["id"].as_u64() == Some(id) {
                assert!(v.get("error").is_none(), "{method} failed: {v}");
                return v["result"].clone();
            }
            self.keep(v);
        }
    }

    fn keep(&mut self, v: Value) {
        if let Some(method) = v["method"].as_str() {
            self.events.push((
                v["sessionId"].as_str().map(str::to_string),
                method.to_string(),
                v["params"].clone(),
            ));
        }
    }

    async fn wait_event(&mut self, session: &str, method: &str) {
        let seen = |events: &[(Option<String>, String, Value)]| {
            events
                .iter()
                .any(|(s, m, _)| s.as_deref() == Some(session) && m == method)
        };
        while !seen(&self.events) {
            let v = self.read().await;
            self.keep(v);
        }
    }
}

/// Loads `file` in a fresh headless Chromium with networking disabled and reports what the
/// page did.
pub fn load(file: &Path) -> PageReport {
    let file = file.canonicalize().expect("page path");
    let url = format!("file://{}", file.display());
    let (browser, ws_url) = launch();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let report = rt.block_on(async {
        let (ws, _) = tokio::time::timeout(BOUND, tokio_tungstenite::connect_async(ws_url))
            .await
            .expect("DevTools connect in time")
            .expect("DevTools connect");
        let mut cdp = Cdp {
            ws,
            next_id: 0,
            events: Vec::new(),
        };
        let target = cdp
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let target_id = target["targetId"].as_str().expect("targetId").to_string();
        let attached = cdp
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await;
        let session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        let s = Some(session.as_str());
        for domain in [
            "Page.enable",
            "Network.enable",
            "Runtime.enable",
            "Log.enable",
        ] {
            cdp.call(s, domain, json!({})).await;
        }
        cdp.call(
            s,
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await;
        cdp.events.clear();
        cdp.call(s, "Page.navigate", json!({"url": url})).await;
        cdp.wait_event(&session, "Page.loadEventFired").await;
        let dom = cdp
            .call(
                s,
                "Runtime.evaluate",
                json!({"expression": CHECKS, "returnByValue": true}),
            )
            .await;
        let dom: Value = serde_json::from_str(
            dom["result"]["value"]
                .as_str()
                .unwrap_or_else(|| panic!("DOM checks did not run: {dom}")),
        )
        .expect("DOM checks JSON");
        let shot = cdp
            .call(
                s,
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": false}),
            )
            .await;
        let screenshot = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64");
        let mut requests = Vec::new();
        let mut errors = Vec::new();
        for (sess, method, params) in &cdp.events {
            if sess.as_deref() != Some(session.as_str()) {
                continue;
            }
            match method.as_str() {
                "Network.requestWillBeSent" => {
                    requests.push(params["request"]["url"].as_str().unwrap_or("?").to_string())
                }
                "Runtime.exceptionThrown" => errors.push(format!("exception: {params}")),
                "Runtime.consoleAPICalled" if params["type"] == "error" => {
                    errors.push(format!("console: {params}"))
                }
                "Log.entryAdded" if params["entry"]["level"] == "error" => {
                    errors.push(format!("log: {}", params["entry"]))
                }
                _ => {}
            }
        }
        let _ = cdp.call(None, "Browser.close", json!({})).await;
        PageReport {
            requests,
            errors,
            dom,
            screenshot,
        }
    });
    drop(browser);
    report
}

/// The distinct colours of a PNG and its size, to tell a rendered page from a blank one.
pub fn png_colours(png_bytes: &[u8]) -> (usize, u32, u32) {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let bytes = &buf[..info.buffer_size()];
    let channels = info.color_type.samples();
    let mut colours = std::collections::HashSet::new();
    for px in bytes.chunks(channels) {
        colours.insert(px.to_vec());
        if colours.len() > 10_000 {
            break;
        }
    }
    (colours.len(), info.width, info.height)
}
