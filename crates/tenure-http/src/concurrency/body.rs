//! The response body that holds the request's permit until it ends.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tenure::lease::LeaseGuard;

pin_project! {
    /// The body of a response that passed the in-flight limit: the inner
    /// service's, holding the permit until its last frame (or its drop),
    /// or a problem document of the middleware's.
    pub struct ConcurrencyBody<B> {
        #[pin]
        inner: Option<B>,
        full: Option<Bytes>,
        permit: Option<LeaseGuard>,
    }
}

impl<B> std::fmt::Debug for ConcurrencyBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyBody")
            .field("holds_permit", &self.permit.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> ConcurrencyBody<B> {
    pub(crate) fn inner(body: B, permit: Option<LeaseGuard>) -> Self {
        ConcurrencyBody {
            inner: Some(body),
            full: None,
            permit,
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        ConcurrencyBody {
            inner: None,
            full: Some(data),
            permit: None,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for ConcurrencyBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(this.full.take().map(|d| Ok(Frame::data(d))));
        };
        let frame = std::task::ready!(inner.poll_frame(cx));
        if frame.is_none() {
            // The last frame is out: the request is no longer in flight.
            this.permit.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(body) => body.is_end_stream(),
            None => self.full.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(body) => body.size_hint(),
            None => SizeHint::with_exact(self.full.as_ref().map_or(0, |d| d.len() as u64)),
        }
    }
}
