//! How errors and reports show names, text read off the masters, and durations.

use std::fmt;
use std::time::Duration;

/// How many bytes of a long resource name messages show.
const SHOWN_NAME_BYTES: usize = 64;

/// A resource name as messages show it: quoted, and when long, its first
/// [`SHOWN_NAME_BYTES`] (cut on a character boundary) and its length.
pub(crate) struct ShortName<'a>(pub(crate) &'a str);

impl fmt::Display for ShortName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.0;
        if name.len() <= SHOWN_NAME_BYTES {
            return write!(f, "{name:?}");
        }
        let mut end = SHOWN_NAME_BYTES;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let shown = format!("{}…", name.get(..end).unwrap_or_default());
        write!(f, "{shown:?} ({} bytes)", name.len())
    }
}

/// Whether `c` would not show as itself on one line of text: a control character
/// ([`char::is_control`]: line breaks, tabs, escapes), a Unicode line or paragraph
/// separator, or a direction override or isolate, which reorders what follows. A label
/// may hold none of them; what reports show of the masters has them escaped ([`OneLine`]).
pub(crate) fn breaks_a_line(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Text read off a master (where any client may have written it: a lock's value, an
/// owner's client id, another kind's name), shown as it is but for the characters that
/// [`breaks_a_line`] names, escaped (`\n`, `\u{202e}`): a report's lines cannot be broken
/// or forged through it, nor a terminal's escapes passed.
pub(crate) struct OneLine<'a>(pub(crate) &'a str);

impl fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match breaks_a_line(c) {
                true => write!(f, "{}", c.escape_default())?,
                false => fmt::Write::write_char(f, c)?,
            }
        }
        Ok(())
    }
}

/// Durations in errors and reports, printed the way people write them (`1.5s`, `250ms`).
pub(crate) fn human(d: Duration) -> String {
    // Cut below the unit, never through `as` (which wraps a duration of many years).
    let rounded = if d >= Duration::from_secs(1) {
        Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000)
    } else {
        Duration::new(0, d.subsec_micros() * 1_000)
    };
    humantime::format_duration(rounded).to_string()
}
