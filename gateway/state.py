"""Everything a gateway process holds for its lifetime, built once in the lifespan.

The services that need only what is here (health, users, projects, policies, groups,
nodes, images, endpoints, usage, audit) are built from it at once, so the lifespan names only
the rest; routes reach every service through the ``Annotated`` aliases of ``gateway.api.deps``."""

from __future__ import annotations

from dataclasses import dataclass, field

from arq.connections import ArqRedis
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.auth import KeyCache
from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.services.audit import AuditLog
from gateway.services.blobs import BlobStore
from gateway.services.budgets import BudgetService
from gateway.services.endpoints import EndpointService
from gateway.services.folders import FolderService
from gateway.services.groups import GroupService
from gateway.services.health import HealthService
from gateway.services.hooks import HookService
from gateway.services.images import ImageService
from gateway.services.logs import LogService
from gateway.services.node_credentials import NodeCredentialService
from gateway.services.nodes import NodeService
from gateway.services.oidc import OidcService
from gateway.services.policies import PolicyService
from gateway.services.projects import ProjectService
from gateway.services.redis_users import RedisUsers
from gateway.services.secrets import SecretService
from gateway.services.sessions import SessionService
from gateway.services.templates import TemplateService
from gateway.services.usage import UsageService
from gateway.services.users import UserService
from gateway.services.webhooks import WebhookService
from plumbing.arq import redis_settings

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
    secrets: SecretService
    oidc: OidcService
    health: HealthService = field(init=False)
    users: UserService = field(init=False)
    projects: ProjectService = field(init=False)
    policies: PolicyService = field(init=False)
    budgets: BudgetService = field(init=False)
    groups: GroupService = field(init=False)
    nodes: NodeService = field(init=False)
    redis_users: RedisUsers = field(init=False)
    node_credentials: NodeCredentialService = field(init=False)
    images: ImageService = field(init=False)
    endpoints: EndpointService = field(init=False)
    usage: UsageService = field(init=False)
    audit: AuditLog = field(init=False)

    def __post_init__(self) -> None:
        self.health = HealthService(self.db, self.pool)
        self.users = UserService(self.db, self.keys)
        self.projects = ProjectService(self.db)
        self.policies = PolicyService(self.db)
        self.budgets = BudgetService(self.db)
        self.groups = GroupService(self.db, self.settings)
        self.nodes = NodeService(self.db, self.pool)
        self.redis_users = RedisUsers(
            self.pool,
            self.db,
            enabled=self.settings.redis_users,
            proxy_secret=self.settings.proxy_secret.get_secret_value(),
            database=redis_settings(self.settings.redis_url).database,
        )
        self.node_credentials = NodeCredentialService(self.db, self.redis_users)
        self.images = ImageService(self.db, self.pool, self.settings)
        self.endpoints = EndpointService(self.db, self.pool, self.sessions)
        self.usage = UsageService(self.db, self.settings)
        self.audit = AuditLog(self.db)
