//! The library side of `plaza-felt`: the emulated-link TCP proxy ([`proxy`]), shared with the
//! whole-system tests (`plaza-tests`), which put it between clients and a gateway.

pub mod proxy;
