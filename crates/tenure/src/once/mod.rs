//! Run once: an operation that runs at most once per key and whose result
//! every caller receives (idempotency keys).
//!
//! The first caller takes a lease on the key (with the watchdog) and runs the
//! operation under it, passing the lease's fence. When it completes, its result
//! is recorded next to the lease for the retention period with a
//! write-if-absent, and the lease is released. Concurrent callers wait (woken
//! by the runner's release, which every store pushes: Redis pub/sub, an etcd
//! watch, the SQLite file's changes, a channel in memory) and receive the recorded
//! result; later callers within the retention period receive it at once. If
//! the runner dies or loses its lease before recording, the next caller takes
//! the lease over — with a higher fence — and runs the operation again.
//!
//! # The guarantee, precisely
//!
//! - **At most one recorded completion** per key and retention period: once a
//!   result is recorded, every caller gets that result and nobody runs the
//!   operation again until the retention ends.
//! - **At least once started**, not exactly once: a runner that crashes, is
//!   paused past its TTL or loses its lease may have done some or all of its
//!   work before another caller starts again. The operation itself must be
//!   idempotent downstream, or fenced: pass the fence to the resource it
//!   writes, which refuses an older fence once a newer runner wrote (see
//!   [`fence`](crate::fence)):
//!
//! ```sql
//! -- The order's row remembers the highest fence that wrote it.
//! UPDATE orders SET state = 'charged', fence = $2 WHERE id = $1 AND fence <= $2;
//! ```
//!
//! - Failures are not recorded unless [`Once::cache_failures`] asks for it:
//!   by default the next caller tries again.
//! - Results larger than [`Once::max_result`] (default [`DEFAULT_MAX_RESULT`])
//!   are refused with [`Error::InvalidArgument`] naming `result`: the
//!   operation ran, its result was not recorded, and the next caller runs it
//!   again.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::once::OnceOutcome;
//!
//! let tenure = tenure::Coordinator::memory();
//! let charge = tenure.once("order:42:charge").retain(Duration::from_secs(24 * 3600));
//! let first = charge
//!     .run(|fence| async move { Ok::<_, String>(format!("charged with fence {fence}")) })
//!     .await?;
//! let OnceOutcome::Ran { result: Ok(charged), .. } = &first else { panic!("ran") };
//! assert!(charged.starts_with("charged with fence "));
//! // A retry (another process, a replayed request) gets the recorded result.
//! let again = charge
//!     .run(|_| async { Ok::<String, String>(unreachable!("not run again")) })
//!     .await?;
//! assert!(matches!(again, OnceOutcome::Recorded { result: Ok(r), .. } if &r == charged));
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lease::{Attempt, Lease, LeaseGuard, LeaseStore, ReleaseWatch};
use crate::record::{PutOutcome, PutRule, Record, RecordStore, result_key};

/// How long results are kept unless [`Once::retain`] says otherwise.
pub const DEFAULT_RETAIN: Duration = Duration::from_secs(24 * 3600);

/// The longest retention accepted.
pub const MAX_RETAIN: Duration = Duration::from_secs(366 * 24 * 3600);

/// The largest result recorded unless [`Once::max_result`] says otherwise.
pub const DEFAULT_MAX_RESULT: usize = 1024 * 1024;

/// The largest result [`Once::max_result`] accepts (a record is read whole by
/// every caller).
pub const MAX_RESULT: usize = 64 * 1024 * 1024;

/// Longest pause between two looks at a running operation when releases are
/// not pushed (a Redis user without channel rights, a watch that could not be
/// set up).
const MAX_POLL: Duration = Duration::from_millis(250);

/// Longest wait for a pushed release before looking again anyway.
const MAX_PUSH_WAIT: Duration = Duration::from_secs(1);

/// Tag of a recorded success / failure (first byte of the record).
const OK_TAG: u8 = b'o';
const ERR_TAG: u8 = b'e';

/// What [`Once::run`] and [`Once::run_bytes`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnceOutcome<T, E> {
    /// This caller ran the operation, under the lease with `fence`.
    Ran {
        /// The fence of this caller's lease.
        fence: Fence,
        /// What the operation returned.
        result: std::result::Result<T, E>,
        /// Whether the result was recorded (a failure is not, unless
        /// [`Once::cache_failures`]; nor is a result someone else recorded
        /// first, see [`Recorded`](Self::Recorded)).
        recorded: bool,
    },
    /// A completion was recorded (by another caller, or by an earlier run):
    /// this caller did not run the operation, or its own result lost to an
    /// earlier recorded one.
    Recorded {
        /// The fence of the run that recorded it.
        fence: Fence,
        /// The recorded result.
        result: std::result::Result<T, E>,
    },
    /// Another caller was still running the operation when the wait set with
    /// [`Once::wait`] ran out.
    Busy {
        /// The runner's remaining lease TTL, when the store knows it.
        ttl_left: Option<Duration>,
    },
}

impl<T, E> OnceOutcome<T, E> {
    /// The result, whoever produced it (`None` when busy).
    pub fn into_result(self) -> Option<std::result::Result<T, E>> {
        match self {
            OnceOutcome::Ran { result, .. } | OnceOutcome::Recorded { result, .. } => Some(result),
            OnceOutcome::Busy { .. } => None,
        }
    }
}

/// A run-once operation on one key; see the [module docs](self).
#[derive(Debug, Clone)]
#[must_use]
pub struct Once {
    lease: Lease,
    store: Arc<dyn LeaseStore>,
    records: Option<Arc<dyn RecordStore>>,
    retain: Duration,
    cache_failures: bool,
    max_result: usize,
    wait: Option<Duration>,
}

impl Once {
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        records: Option<Arc<dyn RecordStore>>,
        key: String,
    ) -> Self {
        Once {
            lease: Lease::new(Arc::clone(&store), key).watchdog(true),
            store,
            records,
            retain: DEFAULT_RETAIN,
            cache_failures: false,
            max_result: DEFAULT_MAX_RESULT,
            wait: None,
        }
    }

    /// How long a recorded result is kept (default [`DEFAULT_RETAIN`], at
    /// most [`MAX_RETAIN`]); after it, the operation runs again.
    pub fn retain(mut self, period: Duration) -> Self {
        self.retain = period;
        self
    }

    /// TTL of the runner's lease (default
    /// [`DEFAULT_TTL`](crate::lease::DEFAULT_TTL)), renewed every third of it:
    /// a crashed runner is taken over about this long after its last renewal.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.lease = self.lease.ttl(ttl);
        self
    }

    /// Records failures too (default off: a failure is returned to its caller
    /// only, and the next caller runs the operation again).
    pub fn cache_failures(mut self, on: bool) -> Self {
        self.cache_failures = on;
        self
    }

    /// The largest result recorded, in bytes as stored (default
    /// [`DEFAULT_MAX_RESULT`], at most [`MAX_RESULT`]).
    pub fn max_result(mut self, bytes: usize) -> Self {
        self.max_result = bytes;
        self
    }

    /// Waits at most this long for another caller's run (default: until it
    /// completes or its lease expires); then [`OnceOutcome::Busy`]. A wait
    /// longer than [`MAX_TTL`](crate::lease::MAX_TTL) means that long.
    pub fn wait(mut self, max: Duration) -> Self {
        self.wait = Some(max);
        self
    }

    /// The key.
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// Runs `op` once per key and retention period, or returns the recorded
    /// result; values go through JSON. See [`run_bytes`](Self::run_bytes).
    pub async fn run<T, E, F, Fut>(&self, op: F) -> Result<OnceOutcome<T, E>>
    where
        T: Serialize + DeserializeOwned,
        E: Serialize + DeserializeOwned,
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let key = self.key().to_string();
        let encoded = std::sync::Mutex::new(None);
        let slot = &encoded;
        let outcome = self
            .run_encoded(|fence| async move {
                let result = op(fence).await;
                let bytes = match &result {
                    Ok(v) => serde_json::to_vec(v).map(|b| (OK_TAG, b)),
                    Err(e) => serde_json::to_vec(e).map(|b| (ERR_TAG, b)),
                };
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                bytes.map_err(|e| {
                    Error::invalid("result", format!("cannot be encoded as JSON: {e}"))
                })
            })
            .await?;
        let decode = |tag: u8, bytes: &[u8]| -> Result<std::result::Result<T, E>> {
            let bad = |e: serde_json::Error| Error::WrongType {
                key: key.clone(),
                detail: format!("the recorded result does not decode as the expected type: {e}"),
            };
            Ok(if tag == OK_TAG {
                Ok(serde_json::from_slice(bytes).map_err(bad)?)
            } else {
                Err(serde_json::from_slice(bytes).map_err(bad)?)
            })
        };
        Ok(match outcome {
            Encoded::Ran { fence, recorded } => {
                match encoded.into_inner().unwrap_or_else(|e| e.into_inner()) {
                    Some(result) => OnceOutcome::Ran {
                        fence,
                        result,
                        recorded,
                    },
                    None => return Err(Error::LeaseLost { key }),
                }
            }
            Encoded::Recorded { fence, tag, bytes } => OnceOutcome::Recorded {
                fence,
                result: decode(tag, &bytes)?,
            },
            Encoded::Busy { ttl_left } => OnceOutcome::Busy { ttl_left },
        })
    }

    /// Runs `op` once per key and retention period, or returns the recorded
    /// result, as bytes. `op` gets the fence of the lease it runs under; it is
    /// cancelled (dropped at its next `.await`) if the lease is lost first, and
    /// [`Error::LeaseLost`] is returned.
    pub async fn run_bytes<F, Fut>(&self, op: F) -> Result<OnceOutcome<Vec<u8>, Vec<u8>>>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = std::result::Result<Vec<u8>, Vec<u8>>>,
    {
        let ran = std::sync::Mutex::new(None);
        let slot = &ran;
        let outcome = self
            .run_encoded(|fence| async move {
                let result = op(fence).await;
                let tagged = match &result {
                    Ok(v) => (OK_TAG, v.clone()),
                    Err(e) => (ERR_TAG, e.clone()),
                };
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                Ok(tagged)
            })
            .await?;
        Ok(match outcome {
            Encoded::Ran { fence, recorded } => {
                match ran.into_inner().unwrap_or_else(|e| e.into_inner()) {
                    Some(result) => OnceOutcome::Ran {
                        fence,
                        result,
                        recorded,
                    },
                    None => {
                        return Err(Error::LeaseLost {
                            key: self.key().to_string(),
                        });
                    }
                }
            }
            Encoded::Recorded { fence, tag, bytes } => OnceOutcome::Recorded {
                fence,
                result: if tag == OK_TAG { Ok(bytes) } else { Err(bytes) },
            },
            Encoded::Busy { ttl_left } => OnceOutcome::Busy { ttl_left },
        })
    }

    fn check(&self) -> Result<Arc<dyn RecordStore>> {
        crate::key::validate_key(self.key())?;
        if self.retain.is_zero() || self.retain > MAX_RETAIN {
            return Err(Error::invalid(
                "retention",
                format!(
                    "{:?} is outside 1ms..=366 days (results must be kept for a while to be found)",
                    self.retain
                ),
            ));
        }
        if self.max_result == 0 || self.max_result > MAX_RESULT {
            return Err(Error::invalid(
                "max_result",
                format!("{} bytes is outside 1..={MAX_RESULT}", self.max_result),
            ));
        }
        self.records.clone().ok_or_else(|| {
            Error::invalid(
                "store",
                format!(
                    "{} keeps no records, so run-once cannot store results there; use one \
                     Redis master, SQLite or memory (a quorum keeps no records)",
                    self.store.describe()
                ),
            )
        })
    }

    /// The protocol, on tagged bytes: find a recorded result or win the lease,
    /// run, record.
    async fn run_encoded<F, Fut>(&self, op: F) -> Result<Encoded>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = Result<(u8, Vec<u8>)>>,
    {
        let records = self.check()?;
        let guard = match self.find_or_win(&*records).await? {
            Found::Recorded(record) => return recorded(self.key(), record),
            Found::Busy { ttl_left } => return Ok(Encoded::Busy { ttl_left }),
            Found::Won(guard) => guard,
        };
        let fence = guard.fence();
        let (tag, bytes) = match guard.run(op(fence)).await {
            Ok(Ok(tagged)) => tagged,
            Ok(Err(e)) | Err(e) => {
                let _ = guard.release().await;
                return Err(e);
            }
        };
        if tag == ERR_TAG && !self.cache_failures {
            let _ = guard.release().await;
            return Ok(Encoded::Ran {
                fence,
                recorded: false,
            });
        }
        let value = match self.tagged(tag, &bytes) {
            Ok(value) => value,
            Err(e) => {
                let _ = guard.release().await;
                return Err(e);
            }
        };
        let put = records
            .put_record(
                &result_key(self.key()),
                &Record { fence, value },
                Some(self.retain),
                PutRule::IfAbsent,
            )
            .await;
        // Released after the record is written, so that a waiter woken by the
        // release finds it.
        let _ = guard.release().await;
        match put? {
            PutOutcome::Written => Ok(Encoded::Ran {
                fence,
                recorded: true,
            }),
            PutOutcome::Kept(earlier) => {
                tracing::warn!(key = self.key(), fence = %fence, recorded = %earlier.fence, "the operation ran, but another run's result was recorded first (this run had lost its lease)");
                recorded(self.key(), earlier)
            }
        }
    }

    /// The value to record: the tag, then the result's bytes; refused when
    /// longer than [`max_result`](Self::max_result).
    fn tagged(&self, tag: u8, bytes: &[u8]) -> Result<Vec<u8>> {
        let len = bytes.len() + 1;
        if len > self.max_result {
            return Err(Error::invalid(
                "result",
                format!(
                    "{len} bytes exceed the limit of {} bytes; the operation ran but its result \
                     was not recorded (raise max_result, or record a reference instead)",
                    self.max_result
                ),
            ));
        }
        let mut value = Vec::with_capacity(len);
        value.push(tag);
        value.extend_from_slice(bytes);
        Ok(value)
    }

    /// Waits until a result is recorded or the lease is ours.
    async fn find_or_win(&self, records: &dyn RecordStore) -> Result<Found> {
        let deadline = self
            .wait
            .map(|w| Instant::now() + crate::duration::capped(w));
        let mut watch: Option<ReleaseWatch> = None;
        let mut backoff = Duration::from_millis(5);
        let record_key = result_key(self.key());
        loop {
            if let Some(record) = records.get_record(&record_key).await? {
                return Ok(Found::Recorded(record));
            }
            let ttl_left = match self.lease.attempt().await? {
                Attempt::Acquired(guard) => {
                    // A runner may have recorded and released between the read
                    // above and this acquire.
                    return match records.get_record(&record_key).await {
                        Ok(Some(record)) => {
                            let _ = guard.release().await;
                            Ok(Found::Recorded(record))
                        }
                        Ok(None) => Ok(Found::Won(guard)),
                        Err(e) => {
                            let _ = guard.release().await;
                            Err(e)
                        }
                    };
                }
                Attempt::Held { ttl_left } => ttl_left,
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(Found::Busy { ttl_left });
            }
            let Some(watch) = watch.as_mut() else {
                // Subscribed, then looked again at once: a release in between
                // is not missed.
                watch = Some(self.store.watch_releases(self.key()).await);
                continue;
            };
            // The runner's lease frees up at the latest when its TTL ends.
            let expiry = ttl_left.map(|t| t + Duration::from_millis(1));
            let pause = if watch.is_push() {
                expiry.unwrap_or(MAX_PUSH_WAIT).min(MAX_PUSH_WAIT)
            } else {
                let jittered = rand::rng().random_range(backoff / 2..=backoff);
                backoff = (backoff * 2).min(MAX_POLL);
                expiry.map_or(jittered, |e| e.min(jittered))
            };
            let pause = deadline.map_or(pause, |d| pause.min(d - now));
            watch.wait(pause).await;
        }
    }
}

/// The outcome of [`Once::run_encoded`].
enum Encoded {
    Ran {
        fence: Fence,
        recorded: bool,
    },
    Recorded {
        fence: Fence,
        tag: u8,
        bytes: Vec<u8>,
    },
    Busy {
        ttl_left: Option<Duration>,
    },
}

enum Found {
    Recorded(Record),
    Won(LeaseGuard),
    Busy { ttl_left: Option<Duration> },
}

fn recorded(key: &str, record: Record) -> Result<Encoded> {
    match record.value.split_first() {
        Some((&tag, bytes)) if tag == OK_TAG || tag == ERR_TAG => Ok(Encoded::Recorded {
            fence: record.fence,
            tag,
            bytes: bytes.to_vec(),
        }),
        _ => Err(Error::WrongType {
            key: key.to_string(),
            detail: "the record is not a run-once result".into(),
        }),
    }
}
