//! The `tracing` spans and events of one scripted scenario on real
//! redis-servers (see `telemetry_common`), captured by a test layer: their
//! fields, their levels, the order of a contended hand-off's story, and that no
//! owner token or password appears in anything recorded.

#![allow(clippy::unwrap_used)]

mod telemetry_common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::sync::{Arc, Mutex};

use telemetry_common::{KEY, LIMIT_KEY, PASSWORD, QUORUM_KEY, SHORT_KEY};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record as Values};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A closed span or an event, with every field as text.
#[derive(Debug, Clone)]
struct Captured {
    /// `open NAME` (a span's start), `span NAME` (its close) or `event MESSAGE`.
    what: String,
    level: Level,
    target: String,
    fields: BTreeMap<String, String>,
    /// The names of the spans an event happened in, innermost first.
    scope: Vec<String>,
}

impl Captured {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

/// Keeps every span's fields (as recorded up to its close) and every event.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        self.0.lock().unwrap().push(Captured {
            what: format!("open {}", attrs.metadata().name()),
            level: *attrs.metadata().level(),
            target: attrs.metadata().target().to_string(),
            fields: fields.0.clone(),
            scope: Vec::new(),
        });
        ctx.span(id).unwrap().extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Values<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        let mut ext = span.extensions_mut();
        values.record(ext.get_mut::<Fields>().unwrap());
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        let scope = ctx
            .event_scope(event)
            .map(|s| s.map(|span| span.name().to_string()).collect())
            .unwrap_or_default();
        self.0.lock().unwrap().push(Captured {
            what: format!("event {message}"),
            level: *event.metadata().level(),
            target: event.metadata().target().to_string(),
            fields: fields.0,
            scope,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).unwrap();
        let fields = span.extensions_mut().remove::<Fields>().unwrap().0;
        self.0.lock().unwrap().push(Captured {
            what: format!("span {}", span.name()),
            level: *span.metadata().level(),
            target: span.metadata().target().to_string(),
            fields,
            scope: Vec::new(),
        });
    }
}

/// Everything the `fmt` layer wrote, as a user would see it.
#[derive(Clone, Default)]
struct Text(Arc<Mutex<Vec<u8>>>);

impl io::Write for Text {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Text {
    type Writer = Text;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn spans<'a>(all: &'a [Captured], name: &str, key: &str) -> Vec<&'a Captured> {
    all.iter()
        .filter(|c| c.what == format!("span {name}") && c.field("key") == Some(key))
        .collect()
}

fn position(all: &[Captured], pred: impl Fn(&Captured) -> bool) -> usize {
    all.iter().position(pred).unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn spans_and_events_tell_the_story_without_tokens_or_passwords() {
    let capture = Capture::default();
    let text = Text::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone()).with(
        tracing_subscriber::fmt::layer()
            .with_writer(text.clone())
            .with_ansi(false)
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL),
    );
    // The runtime is single-threaded, so spawned tasks report here too.
    let _default = tracing::subscriber::set_default(subscriber);
    let played = telemetry_common::play().await;
    // Let the dropped guard's background release finish.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    let all = capture.0.lock().unwrap().clone();
    let mine: Vec<Captured> = all
        .iter()
        .filter(|c| c.target.starts_with("tenure"))
        .cloned()
        .collect();

    // Acquire attempts: A's grant, B's refusal (with the holder's TTL), the
    // waiter's grant with the next fence.
    let acquires = spans(&mine, "acquire", KEY);
    let first = acquires[0];
    assert_eq!(first.level, Level::DEBUG);
    assert_eq!(first.field("outcome"), Some("acquired"));
    // Fences are large numbers (floored by the store's clock): compare them.
    let fence_of = |s: &Captured| s.field("fence").map(|f| f.parse::<u64>().unwrap());
    let (fence_a, fence_b) = (fence_of(first), fence_of(acquires.last().unwrap()));
    assert!(
        fence_a.is_some() && fence_b > fence_a,
        "{fence_a:?} {fence_b:?}"
    );
    assert_eq!(first.field("ttl_ms"), Some("10000"));
    assert!(first.field("latency_us").unwrap().parse::<u64>().is_ok());
    let store = first.field("store").unwrap();
    assert!(store.starts_with("redis://***@127.0.0.1:"), "{store}");
    assert!(acquires.iter().any(|s| {
        s.field("outcome") == Some("held")
            && s.field("ttl_left_ms")
                .is_some_and(|t| t.parse::<u64>().unwrap() > 0)
    }));

    // The wait: several attempts, ended by the hand-off.
    let waits = spans(&mine, "wait", KEY);
    assert_eq!(waits.len(), 1);
    let wait = waits[0];
    assert_eq!(wait.field("outcome"), Some("acquired"));
    assert_eq!(fence_of(wait), fence_b);
    assert_eq!(wait.field("max_wait_ms"), Some("20000"));
    assert!(wait.field("attempts").unwrap().parse::<u32>().unwrap() >= 2);

    // Renewals: A's succeeded, B's found the key gone.
    let extends = spans(&mine, "extend", KEY);
    assert_eq!(extends.len(), 2, "{extends:?}");
    assert_eq!(extends[0].level, Level::TRACE);
    assert_eq!(extends[0].field("outcome"), Some("extended"));
    assert_eq!(fence_of(extends[0]), fence_a);
    assert_eq!(extends[1].field("outcome"), Some("not_held"));
    assert_eq!(fence_of(extends[1]), fence_b);

    // Releases: A's explicit one, B's on drop after the loss, C's after expiry.
    let releases = spans(&mine, "release", KEY);
    assert_eq!(releases.len(), 2, "{releases:?}");
    assert_eq!(releases[0].field("outcome"), Some("released"));
    assert_eq!(fence_of(releases[0]), fence_a);
    assert!(releases[0].field("held_ms").is_some());
    assert_eq!(releases[1].field("outcome"), Some("not_held"));
    assert_eq!(
        spans(&mine, "release", SHORT_KEY)[0].field("outcome"),
        Some("not_held")
    );

    // Losses are warnings, with their cause, once each.
    let lost: Vec<&Captured> = mine
        .iter()
        .filter(|c| c.what == "event lease lost")
        .collect();
    assert_eq!(lost.len(), 2, "{lost:?}");
    assert!(lost.iter().all(|c| c.level == Level::WARN));
    assert_eq!(lost[0].field("key"), Some(KEY));
    assert_eq!(lost[0].field("cause"), Some("not_held"));
    assert_eq!(fence_of(lost[0]), fence_b);
    assert_eq!(lost[1].field("key"), Some(SHORT_KEY));
    assert_eq!(lost[1].field("cause"), Some("deadline"));

    // The story of the hand-off, in order: the waiter is refused and waits,
    // the holder releases, the waiter is woken and granted the next fence.
    // (The wake-up may overtake the release's own reply to the holder.)
    let waiting = position(&mine, |c| c.what == "event held by another holder; waiting");
    let releasing = position(&mine, |c| c.what == "open release");
    let woken = position(&mine, |c| c.what == "event woken by a release");
    let granted = position(&mine, |c| c.what == "span wait");
    assert!(
        waiting < releasing && releasing < woken && woken < granted,
        "{mine:#?}"
    );
    assert_eq!(mine[woken].scope, ["wait"]);
    assert_eq!(mine[woken].level, Level::DEBUG);

    // Rate-limit checks: outcomes and what is left.
    let limits = spans(&mine, "limit", LIMIT_KEY);
    let outcomes: Vec<&str> = limits.iter().map(|s| s.field("outcome").unwrap()).collect();
    // The fallback's own check is a span inside the failed store's span.
    assert_eq!(
        outcomes,
        [
            "allowed",
            "allowed",
            "refused",
            "would_refuse",
            "error",
            "allowed",
            "fallback"
        ]
    );
    assert_eq!(limits[3].field("would_refuse"), Some("true"));
    assert_eq!(limits[2].field("would_refuse"), Some("false"));
    assert_eq!(limits[0].field("remaining"), Some("1"));
    assert_eq!(limits[2].field("remaining"), Some("0"));
    assert_eq!(limits[0].field("cost"), Some("1"));
    assert_eq!(limits[0].field("peek"), Some("false"));

    // Each quorum node's replies: the live ones answered the acquire, the
    // killed one did not.
    let replies: Vec<&Captured> = mine
        .iter()
        .filter(|c| c.what == "event quorum reply" && c.field("key") == Some(QUORUM_KEY))
        .collect();
    assert!(replies.iter().all(|c| c.level == Level::TRACE));
    for node in &played.live_nodes {
        assert!(replies.iter().any(|c| c.field("node") == Some(node)
            && c.field("op") == Some("acquire")
            && c.field("outcome") == Some("answered")));
    }
    let killed: Vec<&str> = replies
        .iter()
        .filter(|c| c.field("node") == Some(&played.killed_node))
        .map(|c| c.field("outcome").unwrap())
        .collect();
    assert!(
        !killed.is_empty() && !killed.contains(&"answered"),
        "{killed:?}"
    );
    // A store's own events happen inside the span of the call that made them:
    // the live nodes' answers, which the call waits for (the killed node's
    // reply is reported after the majority answered, outside it).
    for op in ["acquire", "release"] {
        let answered: Vec<&&Captured> = replies
            .iter()
            .filter(|c| c.field("op") == Some(op) && c.field("outcome") == Some("answered"))
            .collect();
        assert!(
            !answered.is_empty() && answered.iter().all(|c| c.scope.iter().any(|s| s == op)),
            "{op}: {answered:#?}"
        );
    }

    // `info` is quiet: nothing of tenure's at info; warnings only for the two
    // losses and the fallback in use (and the failing renewal of none).
    assert!(!mine.iter().any(|c| c.level == Level::INFO), "{mine:#?}");
    let warnings: Vec<&str> = mine
        .iter()
        .filter(|c| c.level == Level::WARN)
        .map(|c| c.what.as_str())
        .collect();
    assert_eq!(
        warnings,
        [
            "event lease lost",
            "event lease lost",
            "event rate-limit store failed; using the fallback limiter"
        ]
    );

    // No owner token and no password, anywhere.
    let mut everything = String::from_utf8(text.0.lock().unwrap().clone()).unwrap();
    for c in &all {
        write!(everything, "{c:?}").unwrap();
    }
    assert!(everything.contains(KEY), "the capture is empty");
    assert_eq!(played.tokens.len(), 3);
    for token in &played.tokens {
        assert!(!everything.contains(token.as_str()), "token {token} leaked");
    }
    assert!(!everything.contains(PASSWORD), "the password leaked");
}
