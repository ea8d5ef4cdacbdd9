use std::io;

/// Why the congestion controls could not be loaded, attached or fed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This build has no BPF programs, or the kernel cannot run them.
    #[error("eBPF transfer modes unavailable: {0}")]
    Unsupported(String),
    /// Loading or attaching needs privileges this process lacks.
    #[error("eBPF transfer modes need root (CAP_BPF and CAP_NET_ADMIN): {0}")]
    Permission(String),
    /// A congestion control of that name is already registered (another agent?).
    #[error("congestion control {0:?} is already registered: is another mgrp agent running with transfer modes?")]
    AlreadyRegistered(String),
    #[error("bad input: {0}")]
    BadInput(String),
    #[error("{context}: {source}")]
    Bpf {
        context: String,
        #[source]
        source: libbpf_rs::Error,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn bpf(context: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
        let context = context.into();
        // Not mapped to `Permission`: root was checked first, and the verifier refuses
        // programs with EACCES too.
        move |source| Error::Bpf { context, source }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}
