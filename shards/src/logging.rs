//! Logs: `tracing` to stderr, human lines or JSON lines (`--log-format`),
//! colours only on a terminal, and a filter that SIGHUP can swap.
//!
//! What goes where: `info` for what an operator acts on (the node running
//! and stopping, joining, contacts gained and lost, cluster changes, limits
//! hit, reloads); `debug` for more (each contact, dropped calls); `trace`
//! for every datagram dropped.

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One readable line per event (colours only when stderr is a terminal).
    #[default]
    Human,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Swaps the filter of the running subscriber.
#[derive(Clone)]
pub struct FilterHandle {
    handle: reload::Handle<EnvFilter, Registry>,
    /// Whether `RUST_LOG` set the filter (it then wins over the file).
    from_env: bool,
}

impl FilterHandle {
    /// Replaces the filter with `directives` (unless `RUST_LOG` is set).
    /// Returns whether it changed anything.
    pub fn set(&self, directives: &str) -> Result<bool, String> {
        if self.from_env {
            return Ok(false);
        }
        let filter = EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
        let before = self
            .handle
            .with_current(|f| f.to_string())
            .map_err(|e| e.to_string())?;
        if before == filter.to_string() {
            return Ok(false);
        }
        self.handle.reload(filter).map_err(|e| e.to_string())?;
        Ok(true)
    }
}

/// Checks a filter's syntax (the config's `log` key).
pub fn check_filter(directives: &str) -> Result<(), String> {
    EnvFilter::try_new(directives)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Starts logging to stderr with `directives` as the filter (`RUST_LOG`
/// overrides it).
pub fn init(format: LogFormat, directives: &str) -> FilterHandle {
    let env = std::env::var("RUST_LOG").ok().filter(|s| !s.is_empty());
    let from_env = env.is_some();
    let filter = env
        .and_then(|e| EnvFilter::try_new(e).ok())
        .or_else(|| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::io::stderr().is_terminal();
    let output: Box<dyn Layer<_> + Send + Sync> = match format {
        LogFormat::Human => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .try_init();
    FilterHandle { handle, from_env }
}
