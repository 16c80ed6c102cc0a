//! The seed's 160-bit compressed movement message (placeholder until the codec lands).
