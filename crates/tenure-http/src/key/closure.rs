//! Any closure `Fn(&RequestHead<'_>) -> Option<String>` is a [`KeyExtractor`].

use super::{KeyExtractor, RequestHead};

impl<F> KeyExtractor for F
where
    F: Fn(&RequestHead<'_>) -> Option<String> + Send + Sync + 'static,
{
    fn extract(&self, head: &RequestHead<'_>) -> Option<String> {
        self(head)
    }
}
