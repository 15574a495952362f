"""Everything a gateway process holds for its lifetime, built once in the lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from arq.connections import ArqRedis
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.auth import KeyCache
from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.services.blobs import BlobStore
from gateway.services.folders import FolderService
from gateway.services.hooks import HookService
from gateway.services.logs import LogService
from gateway.services.sessions import SessionService
from gateway.services.templates import TemplateService
from gateway.services.webhooks import WebhookService

__all__ = ["AppState"]


@dataclass
class AppState:
    settings: GatewaySettings
    engine: AsyncEngine
    db: SessionFactory
    pool: ArqRedis
    keys: KeyCache
    sessions: SessionService
    logs: LogService
    blobs: BlobStore
    templates: TemplateService
    hooks: HookService
    webhooks: WebhookService
    folders: FolderService
