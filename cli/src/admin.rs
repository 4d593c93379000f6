//! The operator's subcommands: `inspect`, `force-unlock`, `init` and `check`.

use std::time::{Duration, SystemTime};

use redquorum::{Holding, Inspection, MasterHealth, MasterView, OwnerInfo, Redlock, Verdict};
use serde_json::{Value, json};

use crate::exit::{self, Code, Failure};
use crate::settings::Settings;

/// Runs `work` with a client of `settings`, then shuts the client down (so that
/// background releases finish) whatever the outcome.
async fn with_client<F, Fut>(settings: &Settings, work: F) -> Result<u8, Failure>
where
    F: FnOnce(Redlock) -> Fut,
    Fut: Future<Output = Result<u8, Failure>>,
{
    let client = settings.client()?;
    let outcome = work(client.clone()).await;
    client.shutdown().await;
    outcome
}

/// `redquorum inspect KEY [--json]`.
pub(crate) async fn inspect(settings: &Settings, key: &str, as_json: bool) -> Result<u8, Failure> {
    with_client(settings, |client| async move {
        let inspection = client.inspect(key).await.map_err(|e| Failure::of(&e))?;
        if as_json {
            exit::out(&format!("{}\n", to_json(&inspection)));
        } else {
            exit::out(&table(&inspection));
        }
        Ok(0)
    })
    .await
}

/// `redquorum force-unlock KEY --value V | --any`.
pub(crate) async fn force_unlock(
    settings: &Settings,
    key: &str,
    value: Option<&str>,
) -> Result<u8, Failure> {
    with_client(settings, |client| async move {
        let report = match value {
            Some(value) => client.force_unlock(key, value).await,
            None => client.force_unlock_any(key).await,
        }
        .map_err(|e| Failure::of(&e))?;
        // The report names the values it deleted, read off the masters.
        exit::out(&format!("{}\n", one_line(&report.to_string())));
        Ok(0)
    })
    .await
}

/// `redquorum init`.
pub(crate) async fn init(settings: &Settings) -> Result<u8, Failure> {
    with_client(settings, |client| async move {
        let init = client.init_cluster().await.map_err(|e| Failure::of(&e))?;
        exit::out(&format!("{init}\n"));
        Ok(0)
    })
    .await
}

/// The lock name `check` inspects to connect to every master; never locked.
const PROBE: &str = "redquorum-check";

/// `redquorum check`: 0 when every master is healthy and votes, 69 otherwise.
pub(crate) async fn check(settings: &Settings) -> Result<u8, Failure> {
    with_client(settings, |client| async move {
        // A client judges whether a master votes (restart quarantine, the cluster record)
        // when it connects for locks: a read-only inspection of an unused name makes it
        // connect to every master first, so that the report can say. Its outcome is the
        // report's to tell.
        let _ = client.inspect(PROBE).await;
        let report = client.check_masters().await;
        exit::out(&report.to_string());
        let voting = report.masters().iter().all(MasterHealth::votes);
        if report.is_healthy() && voting {
            return Ok(0);
        }
        // The report may call itself healthy (nothing to change) while masters do not
        // vote yet: say why the status is not 0.
        let silent: Vec<&str> = report
            .masters()
            .iter()
            .filter(|m| !m.votes() || !m.is_healthy())
            .map(|m| m.master())
            .collect();
        exit::note(&format!(
            "{} of {} masters cannot vote now ({}): see the report above",
            silent.len(),
            report.masters().len(),
            silent.join(", ")
        ));
        Ok(Code::Unavailable.get())
    })
    .await
}

/// A duration for people: whole milliseconds, humantime's form ("1s 250ms").
fn human(d: Duration) -> String {
    let ms = Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    humantime::format_duration(ms).to_string()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Who an owner record names, short: label, host, pid.
fn owner_text(owner: Option<&OwnerInfo>) -> String {
    let Some(owner) = owner else {
        return "-".to_owned();
    };
    let mut parts = Vec::new();
    if !owner.label.is_empty() {
        parts.push(one_line(&owner.label));
    }
    if !owner.host.is_empty() {
        parts.push(one_line(&owner.host));
    }
    if let Some(pid) = owner.pid {
        parts.push(format!("pid {pid}"));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(" ")
    }
}

/// `text`, read off a master (where any client may have written it), as it can be shown
/// in one cell of one line: control characters, Unicode line separators and direction
/// overrides escaped (`\n`, `\u{202e}`), so that a label, a lock's value or anything
/// else a master holds cannot break or forge the table, or send the terminal escapes.
fn one_line(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        let breaks = c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
        match breaks {
            true => shown.extend(c.escape_default()),
            false => shown.push(c),
        }
    }
    shown
}

/// One row of the table: master, state or value, TTL, owner, fence counter.
fn row(view: &MasterView) -> [String; 5] {
    let (state, ttl, owner) = match view.holding() {
        Holding::Free => ("free".to_owned(), "-".to_owned(), "-".to_owned()),
        Holding::Lock { value, ttl, owner } => (
            value.clone(),
            ttl.map_or_else(|| "no expiry".to_owned(), human),
            owner_text(owner.as_ref()),
        ),
        Holding::OtherKind { kind } => (
            format!("other kind: {kind}"),
            "-".to_owned(),
            "-".to_owned(),
        ),
        Holding::Unreachable(error) => (
            format!("unreachable: {error}"),
            "-".to_owned(),
            "-".to_owned(),
        ),
        other => (other.to_string(), "-".to_owned(), "-".to_owned()),
    };
    // A lock's value and another kind's name are read off the master, where any client
    // may have written them.
    let state = one_line(&state);
    let fence = view
        .fence_counter()
        .map_or_else(|| "-".to_owned(), |c| c.to_string());
    [view.master().to_owned(), state, ttl, owner, fence]
}

/// The inspection as a table, one master a row, under the verdict.
fn table(inspection: &Inspection) -> String {
    let mut rows = vec![[
        "MASTER".to_owned(),
        "VALUE".to_owned(),
        "TTL".to_owned(),
        "OWNER".to_owned(),
        "FENCE".to_owned(),
    ]];
    rows.extend(inspection.masters().iter().map(row));
    let mut widths = [0usize; 5];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = format!(
        "lock {} (key {}): {}{}\n",
        inspection.resource(),
        inspection.key(),
        // The holder's value and client id, read off the masters, as the table's cells.
        one_line(&inspection.verdict().to_string()),
        if inspection.handed() {
            " (handed to that queued waiter, not yet confirmed)"
        } else {
            ""
        }
    );
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn owner_json(owner: Option<&OwnerInfo>) -> Value {
    let Some(owner) = owner else {
        return Value::Null;
    };
    json!({
        "label": owner.label,
        "host": owner.host,
        "pid": owner.pid,
        "client": owner.client,
        "acquired_unix_ms": owner.acquired.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map(millis),
        "held_for_ms": owner.held_for.map(millis),
        "fencing_token": owner.token.map(|t| t.get()),
    })
}

fn master_json(view: &MasterView) -> Value {
    let holding = match view.holding() {
        Holding::Free => json!({ "state": "free" }),
        Holding::Lock { value, ttl, owner } => json!({
            "state": "lock",
            "value": value,
            "ttl_ms": ttl.map(millis),
            "owner": owner_json(owner.as_ref()),
        }),
        Holding::OtherKind { kind } => json!({ "state": "other_kind", "kind": kind }),
        Holding::Unreachable(error) => {
            json!({ "state": "unreachable", "error": error.to_string() })
        }
        other => json!({ "state": "unknown", "detail": other.to_string() }),
    };
    let mut object = json!({
        "master": view.master(),
        "fence_counter": view.fence_counter(),
        "handed": view.handed(),
    });
    if let (Value::Object(object), Value::Object(holding)) = (&mut object, holding) {
        object.extend(holding);
    }
    object
}

/// The inspection as one JSON object: `resource`, `key`, `verdict` (with `state`: held,
/// free, split, unknown or other_kind; a held one says whether its value is a queued
/// waiter's id that a release `handed` the key to), `masters` (each with `state`: free,
/// lock, other_kind or unreachable, and whether it `handed` the key to a queued waiter).
fn to_json(inspection: &Inspection) -> Value {
    let verdict = match inspection.verdict() {
        Verdict::Held {
            value,
            owner,
            remaining,
        } => json!({
            "state": "held",
            "value": value,
            "remaining_ms": remaining.map(millis),
            "owner": owner_json(owner.as_ref()),
            "handed": inspection.handed(),
        }),
        Verdict::Free => json!({ "state": "free" }),
        Verdict::Split => json!({ "state": "split" }),
        Verdict::Unknown => json!({ "state": "unknown" }),
        Verdict::OtherKind { kind } => json!({ "state": "other_kind", "kind": kind }),
        other => json!({ "state": "unknown", "detail": other.to_string() }),
    };
    json!({
        "resource": inspection.resource(),
        "key": inspection.key(),
        "verdict": verdict,
        "summary": inspection.verdict().to_string(),
        "masters": inspection.masters().iter().map(master_json).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn what_a_master_holds_is_shown_on_one_line() {
        assert_eq!(one_line("billing é ✓"), "billing é ✓");
        assert_eq!(one_line("a\nholder: b"), "a\\nholder: b");
        assert_eq!(one_line("x\u{1b}[2J"), "x\\u{1b}[2J");
        assert_eq!(one_line("rtl\u{202e}exe"), "rtl\\u{202e}exe");
        assert_eq!(one_line("l\u{2028}s"), "l\\u{2028}s");
        assert!(!one_line("\t\r\u{85}\u{2066}").chars().any(char::is_control));
        assert_eq!(
            one_line("\u{202a}\u{2066}\u{2069}"),
            "\\u{202a}\\u{2066}\\u{2069}"
        );
    }

    /// `one_line` escapes exactly what the library refuses in a label of its own
    /// (`Builder::label`), so that the two lists, written twice, cannot drift apart.
    #[test]
    fn what_is_escaped_is_what_a_label_may_not_hold() {
        let chars = (0..0x3000).chain([0x061c, 0xfeff, 0xfff9, 0xe0001]);
        for c in chars.filter_map(char::from_u32) {
            let label = format!("a{c}b");
            let refused = redquorum::Redlock::builder()
                .masters(["redis://127.0.0.1:1"])
                .label(label.as_str())
                .build()
                .is_err();
            let escaped = one_line(&label) != label;
            assert_eq!(
                escaped, refused,
                "{c:?}: escaped {escaped}, refused {refused}"
            );
        }
    }
}
