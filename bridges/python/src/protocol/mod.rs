//! The DLPack Python protocol's pieces that both directions use: capsules and their ownership
//! rules, and the protocol's arguments parsed into typed requests.

pub mod capsule;
pub mod request;
