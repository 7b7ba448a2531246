//! How a command ends: an exit code (SPEC section 6), or a failure that maps to one.

// The codes themselves are the contract with scripts and cron (SPEC section 6): never renumber.
pub const OK: u8 = 0;
pub const OPERATIONAL: u8 = 1;
pub const USAGE: u8 = 2;
pub const FINDINGS: u8 = 3;
/// Stopped by SIGINT/SIGTERM before every file was processed.
pub const INTERRUPTED: u8 = 130;
/// Whoever read our output stopped reading (`x12gate claims | head`): what a program killed
/// by SIGPIPE exits with, without a word.
pub const PIPE_CLOSED: u8 = 141;

/// Whether a failure is only the reader of our output gone away.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Why a command stopped: a usage or set-up mistake (exit 2), or an operational failure
/// (exit 1).
pub enum Failure {
    Usage(anyhow::Error),
    Operational(anyhow::Error),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Operational(e.into())
    }
}

/// A registry error as the command line sees it: a missing, foreign or other gateway's
/// registry is a set-up mistake (exit 2), the rest operational (exit 1).
pub fn registry_failure(e: x12gate::registry::RegistryError) -> Failure {
    if e.is_setup() {
        Failure::Usage(e.into())
    } else {
        Failure::Operational(e.into())
    }
}

/// A desk error as the command line sees it: what the operator asked for that cannot be
/// done is a usage mistake (exit 2).
pub fn desk_failure(e: x12gate::desk::DeskError) -> Failure {
    use x12gate::desk::DeskError;
    match e {
        DeskError::Registry(e) => registry_failure(e),
        DeskError::Process(e) => Failure::Operational(e.into()),
        e => Failure::Usage(e.into()),
    }
}
