//! [`RedisDirectory`]: the cluster backend (in progress).

/// Options of the Redis backend.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Prefix of every key (default `plaza:`).
    pub prefix: String,
}

/// The Redis directory.
#[derive(Debug)]
pub struct RedisDirectory {}
