//! The HTML report in a real browser: headless Chromium (Debian's `chromium`, which
//! `.ci/run` installs) loads the page of the incident fixture from a file. The test checks
//! that the browser logged no console message (the page runs no script and loads nothing,
//! so any message is an error: a blocked load, a parse failure), that a screenshot was taken
//! and is not blank, and that the charts' SVG elements are in the DOM the browser built.
//!
//! The browser test is `#[ignore]`d, with the reason, so that `cargo test` lists it as
//! ignored instead of passing it unseen on a machine without Chromium; `.ci/run` runs it
//! explicitly (`--ignored`), and run that way it fails when Chromium is missing.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const CHROMIUM: &str = "/usr/bin/chromium";

/// Longest a browser run may take before the test kills it and fails.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(120);

/// A directory of its own under the temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let marker = TempFile::reserve(name);
        let dir = marker.path().to_path_buf();
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct BrowserRun {
    stdout: String,
    stderr: String,
}

/// Runs headless Chromium on `page` with `extra` arguments, with a timeout.
fn chromium(profile: &Path, page: &Path, extra: &[String]) -> BrowserRun {
    let mut args: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1400,2400",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("--user-data-dir={}", profile.display()));
    args.extend(extra.iter().cloned());
    args.push(format!("file://{}", page.display()));
    let mut child = Command::new(CHROMIUM)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("could not start chromium");
    let mut out_pipe = child.stdout.take().expect("stdout piped");
    let mut err_pipe = child.stderr.take().expect("stderr piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            let stdout = out_reader.join().expect("stdout reader");
            let stderr = err_reader.join().expect("stderr reader");
            assert!(status.success(), "chromium exited with {status}\n{stderr}");
            return BrowserRun { stdout, stderr };
        }
        if started.elapsed() > BROWSER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {BROWSER_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The console messages and uncaught errors that Chromium logged for the page.
fn console_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect()
}

/// A decoded PNG: width, height and RGBA pixels.
struct Image {
    width: u32,
    height: u32,
    rgba: Vec<[u8; 4]>,
}

/// Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes).
fn decode_png(bytes: &[u8]) -> Image {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let mut pos = 8;
    let (mut width, mut height, mut channels) = (0u32, 0u32, 0usize);
    let mut idat = Vec::new();
    while pos + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        let kind = &bytes[pos + 4..pos + 8];
        let data = &bytes[pos + 8..pos + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(data[0..4].try_into().unwrap());
                height = u32::from_be_bytes(data[4..8].try_into().unwrap());
                assert_eq!(data[8], 8, "bit depth");
                channels = match data[9] {
                    2 => 3,
                    6 => 4,
                    other => panic!("PNG colour type {other} not supported here"),
                };
                assert_eq!(data[12], 0, "interlaced PNG");
            }
            b"IDAT" => idat.extend_from_slice(data),
            b"IEND" => break,
            _ => {}
        }
        pos += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .expect("inflate PNG data");
    let stride = width as usize * channels;
    assert_eq!(raw.len(), height as usize * (stride + 1), "PNG data size");
    let mut pixels = vec![0u8; height as usize * stride];
    for y in 0..height as usize {
        let filter = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let a = if x >= channels {
                pixels[y * stride + x - channels]
            } else {
                0
            };
            let b = if y > 0 {
                pixels[(y - 1) * stride + x]
            } else {
                0
            };
            let c = if x >= channels && y > 0 {
                pixels[(y - 1) * stride + x - channels]
            } else {
                0
            };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((a as u16 + b as u16) / 2) as u8,
                4 => {
                    let p = a as i16 + b as i16 - c as i16;
                    let (pa, pb, pc) = (
                        (p - a as i16).abs(),
                        (p - b as i16).abs(),
                        (p - c as i16).abs(),
                    );
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("PNG filter {other}"),
            };
            pixels[y * stride + x] = line[x].wrapping_add(predicted);
        }
    }
    let rgba = pixels
        .chunks(channels)
        .map(|p| [p[0], p[1], p[2], if channels == 4 { p[3] } else { 255 }])
        .collect();
    Image {
        width,
        height,
        rgba,
    }
}

#[test]
#[ignore = "needs /usr/bin/chromium; .ci/run runs it with --ignored"]
fn the_incident_report_renders_in_headless_chromium_without_console_errors() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium; .ci/run does)"
    );
    let dir = TempDir::new("browser");
    let page = dir.0.join("incident.html");
    let run = analyze(&[
        "--format",
        "html",
        "--output",
        page.to_str().unwrap(),
        "fixtures/incident.jsonl",
    ]);
    run.expect_code(0);

    let png = dir.0.join("incident.png");
    let shot = chromium(
        &dir.0.join("profile-shot"),
        &page,
        &[format!("--screenshot={}", png.display())],
    );
    let errors = console_errors(&shot.stderr);
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));

    let image = decode_png(&std::fs::read(&png).expect("chromium wrote the screenshot"));
    assert_eq!((image.width, image.height), (1400, 2400));
    let first = image.rgba[0];
    let differing = image.rgba.iter().filter(|&&p| p != first).count();
    assert!(
        differing > image.rgba.len() / 50,
        "the screenshot is blank: only {differing} pixels differ from the first"
    );
    let mut colours: Vec<[u8; 4]> = image.rgba.iter().step_by(97).copied().collect();
    colours.sort_unstable();
    colours.dedup();
    assert!(
        colours.len() > 20,
        "only {} colours on the page",
        colours.len()
    );

    let dom = chromium(
        &dir.0.join("profile-dom"),
        &page,
        &["--dump-dom".to_string()],
    );
    let errors = console_errors(&dom.stderr);
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));
    for element in [
        "<svg id=\"funnel-chart\"",
        "<svg id=\"class-chart\"",
        "<svg id=\"attempts-over-time\"",
        "class=\"f-orig series-originals\"",
        "class=\"f-retry series-retries\"",
        "class=\"burst-marker\"",
        "<svg class=\"chart op-timeline\"",
        "class=\"f-hl first-multiplying\"",
    ] {
        assert!(
            dom.stdout.contains(element),
            "the browser's DOM has no {element}"
        );
    }
    assert_eq!(
        dom.stdout
            .matches("<svg class=\"chart op-timeline\"")
            .count(),
        10,
        "one timeline per worst operation"
    );
}

#[test]
fn console_messages_and_uncaught_errors_in_chromium_logs_are_caught() {
    // Lines as Chromium 156 logs them with --enable-logging=stderr --v=0.
    let log = "[1:2:1130/015812.760466:ERROR:dbus/bus.cc:405] Failed to connect to the bus\n\
               [1:1:1130/015813.268215:INFO:CONSOLE:1] \"boom\", source: file:///tmp/t.html (1)\n\
               [1:1:1130/015813.268330:INFO:CONSOLE:1] \"Uncaught ReferenceError: f is not defined\", source: file:///tmp/t.html (1)\n";
    assert_eq!(console_errors(log).len(), 2);
    assert!(console_errors("[1:2:1130/0:ERROR:dbus/bus.cc:405] no bus\n").is_empty());
}
