"""One more try for search failures that may pass: rate limits, timeouts, server errors."""

from __future__ import annotations

import logging

import tenacity

from crag.websearch.base import SearchProvider, SearchResult, SearchUnavailableError

logger = logging.getLogger(__name__)

SEARCH_RETRIES = 1
"""Extra attempts after a transient failure."""
SEARCH_BACKOFF = 1.0
"""Seconds before the first retry (doubled for each further one)."""


class TransientSearchError(SearchUnavailableError):
    """A search failure worth retrying: rate limit (HTTP 429), timeout or HTTP 5xx.

    Other failures (HTTP 4xx, a wrong URL, no network, a missing API key) are raised as plain
    :class:`~crag.websearch.base.SearchUnavailableError` and are not retried.
    """


def search_with_retry(
    provider: SearchProvider,
    query: str,
    max_results: int,
    *,
    retries: int | None = None,
    backoff: float | None = None,
) -> list[SearchResult]:
    """``provider.search(query, max_results)``, retried after a transient failure.

    Args:
        provider: The search provider.
        query: The query.
        max_results: Most results wanted.
        retries: Extra attempts (default :data:`SEARCH_RETRIES`).
        backoff: Seconds before the first retry (default :data:`SEARCH_BACKOFF`).

    Raises:
        SearchUnavailableError: the last attempt's error.
    """
    retries = SEARCH_RETRIES if retries is None else retries
    backoff = SEARCH_BACKOFF if backoff is None else backoff

    def log_retry(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        logger.info("%s search failed (%s); retrying in %.1f s", provider.name, error, delay)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(TransientSearchError),
        stop=tenacity.stop_after_attempt(retries + 1),
        wait=tenacity.wait_exponential(multiplier=backoff, exp_base=2, min=0),
        before_sleep=log_retry,
        reraise=True,
    )
    return retrying(provider.search, query, max_results)
