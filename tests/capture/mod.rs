//! What a test's thread traces, captured for assertions (`tracing` and
//! `tracing-subscriber` are dev-dependencies of the library's tests only).
#![allow(clippy::unwrap_used, dead_code, unreachable_pub)]

/// Everything a `tracing` subscriber installed by [`Captured::install`] writes, shared with
/// the test.
#[derive(Clone, Default)]
pub struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Captures what this thread traces from `level` up, with the span events `spans`,
    /// until the guard is dropped. A current-thread runtime runs every task of its
    /// clients on the test's thread, so it sees them all.
    pub fn install(
        level: tracing::Level,
        spans: tracing_subscriber::fmt::format::FmtSpan,
    ) -> (Captured, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_span_events(spans)
            .with_writer(move || writer.clone())
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }

    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Forgets what was written so far.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}
