"""``embedkit serve``'s library side: an index and its model behind FastAPI, with micro-batched queries.

``fastapi`` and ``uvicorn`` (the ``serve`` extra) are imported by ``app``, ``bodies`` and ``errors`` only; settings,
the batcher and the engine work without them.
"""

from embedkit.serving.settings import ServeSettings

__all__ = ["ServeSettings"]
