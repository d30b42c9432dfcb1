//! How a session's own tools reach the session service, a layer above them: the comms tools
//! ([`PeerDirectory`]), the delegation tools ([`Delegator`]) and the memory tools ([`Recall`]) only know their session's id and
//! hold a [`SessionLink`] the service fills when it spawns the session. The link is weak, so a
//! tool never keeps the service alive, and there is no cycle and no global registry.

use std::sync::{Arc, OnceLock, Weak};

use super::comms::PeerDirectory;
use super::delegation::Delegator;
use super::memory::Recall;

/// Everything a session's tools ask of the service.
pub trait SessionHub: PeerDirectory + Delegator + Recall {}

impl<T: PeerDirectory + Delegator + Recall> SessionHub for T {}

/// A session's connection to its [`SessionHub`], set once the session is spawned.
pub type SessionLink = Arc<OnceLock<Weak<dyn SessionHub>>>;

/// The service behind `link`, or the text the model sees when there is none.
pub fn hub(link: &SessionLink) -> Result<Arc<dyn SessionHub>, String> {
    link.get().and_then(Weak::upgrade).ok_or_else(|| "this tool is not available outside a session".to_owned())
}
