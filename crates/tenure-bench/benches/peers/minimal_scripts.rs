//! The shortest correct script of each rate-limit algorithm for one policy on
//! one key, on the server's clock: the yardstick for tenure's limiter script.
//! They skip what tenure's script adds (type checks and validation of stored
//! values, compound policies, peek, cost, retry and reset times).
//!
//! KEYS[1] the key; ARGV[1] capacity, ARGV[2] period µs, ARGV[3] interval µs,
//! ARGV[4] a nonce. Returns 1 when allowed, 0 when refused.

use tenure::limit::Algorithm;

const NOW: &str = "local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local cap, period, interval = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
";

const GCRA: &str = "local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
if tat + interval - now > cap * interval then return 0 end
redis.call('SET', KEYS[1], string.format('%d', tat + interval), 'PX',
  math.ceil((tat + interval - now) / 1000))
return 1
";

const TOKEN_BUCKET: &str = "local s = redis.call('HMGET', KEYS[1], 'tokens', 'last')
local tokens, last = tonumber(s[1]) or cap, tonumber(s[2]) or now
local added = math.floor((now - last) / interval)
if tokens + added >= cap then
  tokens, last = cap, now
else
  tokens, last = tokens + added, last + added * interval
end
if tokens < 1 then return 0 end
redis.call('HSET', KEYS[1], 'tokens', tokens - 1, 'last', string.format('%d', last))
redis.call('PEXPIRE', KEYS[1], math.ceil((cap - tokens + 1) * interval / 1000))
return 1
";

const SLIDING_LOG: &str =
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - period))
if redis.call('ZCARD', KEYS[1]) >= cap then return 0 end
local at = string.format('%d', now)
redis.call('ZADD', KEYS[1], at, at .. ':' .. ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil(period / 1000))
return 1
";

const SLIDING_WINDOW: &str = "local start = now - now % period
local s = redis.call('HMGET', KEYS[1], 'start', 'current', 'previous')
local current, previous, at = 0, 0, tonumber(s[1])
if at == start then
  current, previous = tonumber(s[2]), tonumber(s[3])
elseif at == start - period then
  previous = tonumber(s[2])
end
if previous * (period - (now - start)) / period + current + 1 > cap then return 0 end
redis.call('HSET', KEYS[1], 'start', string.format('%d', start), 'current', current + 1,
  'previous', previous)
redis.call('PEXPIRE', KEYS[1], math.ceil((2 * period - (now - start)) / 1000))
return 1
";

const FIXED_WINDOW: &str = "local start = now - now % period
local s = redis.call('HMGET', KEYS[1], 'start', 'count')
local count = 0
if tonumber(s[1]) == start then count = tonumber(s[2]) end
if count >= cap then return 0 end
redis.call('HSET', KEYS[1], 'start', string.format('%d', start), 'count', count + 1)
redis.call('PEXPIRE', KEYS[1], math.ceil((start + period - now) / 1000))
return 1
";

/// The minimal script of `algorithm`.
pub fn script(algorithm: Algorithm) -> String {
    let body = match algorithm {
        Algorithm::Gcra => GCRA,
        Algorithm::TokenBucket => TOKEN_BUCKET,
        Algorithm::SlidingLog => SLIDING_LOG,
        Algorithm::SlidingWindow => SLIDING_WINDOW,
        _ => FIXED_WINDOW,
    };
    format!("{NOW}{body}")
}
