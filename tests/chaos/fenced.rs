//! The fenced register of docs/testing.md §2, kept on the checker store: every read and
//! every write carries the caller's fencing token, and is refused when a larger token has
//! been seen. Reads register their token too, or a stale holder could write between a
//! newer holder's read and its write.
//!
//! Shared by the chaos suite and the `redquorum-chaos-client` binary (which cannot use
//! dev-dependencies), so it needs only `redis`.
#![allow(dead_code, unreachable_pub)]

use redis::aio::MultiplexedConnection;

/// One script for both operations, so the token check and the access are atomic.
const REGISTER: &str = r"
-- KEYS[1] value, KEYS[2] newest token seen, KEYS[3] refusals, KEYS[4] writes applied
-- ARGV[1] token; ARGV[2] the value to write, or '' to read
local newest = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < newest then
  redis.call('INCR', KEYS[3])
  return false
end
redis.call('SET', KEYS[2], ARGV[1])
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('INCR', KEYS[4])
  return tonumber(ARGV[2])
end
return tonumber(redis.call('GET', KEYS[1]) or '0')
";

/// The register's keys for `resource`: value, newest token, refusals, writes applied.
pub fn keys(resource: &str) -> [String; 4] {
    [
        format!("{resource}:freg"),
        format!("{resource}:freg:newest"),
        format!("{resource}:freg:refused"),
        format!("{resource}:freg:applied"),
    ]
}

async fn call(
    conn: &mut MultiplexedConnection,
    resource: &str,
    token: u64,
    write: Option<u64>,
) -> redis::RedisResult<Option<u64>> {
    let [value, newest, refused, applied] = keys(resource);
    redis::Script::new(REGISTER)
        .key(value)
        .key(newest)
        .key(refused)
        .key(applied)
        .arg(token)
        .arg(write.map_or_else(String::new, |v| v.to_string()))
        .invoke_async(conn)
        .await
}

/// A fenced read: the register's value, or `None` when `token` was refused.
pub async fn read(
    conn: &mut MultiplexedConnection,
    resource: &str,
    token: u64,
) -> redis::RedisResult<Option<u64>> {
    call(conn, resource, token, None).await
}

/// A fenced write of `value`: whether it was applied.
pub async fn write(
    conn: &mut MultiplexedConnection,
    resource: &str,
    token: u64,
    value: u64,
) -> redis::RedisResult<bool> {
    Ok(call(conn, resource, token, Some(value)).await?.is_some())
}
