"""The ValidatingAdmissionWebhook admission plugin: ValidatingWebhookConfigurations' webhooks, called
concurrently after the built-in validating plugins, on the object as it will be stored (or, on a
delete, the object being deleted)."""

from __future__ import annotations

from apiserver.admission.interfaces import (
    CONNECT,
    CREATE,
    DELETE,
    UPDATE,
    Attributes,
    PluginConfig,
    ValidationInterface,
)
from apiserver.admission.webhook.dispatch import Dispatcher
from apiserver.admission.webhook.matching import exempt
from services.api.catalog import Resource


class ValidatingAdmissionWebhook(ValidationInterface):
    name = "ValidatingAdmissionWebhook"
    operations = frozenset({CREATE, UPDATE, DELETE, CONNECT})
    subresources = None

    def __init__(self, config: PluginConfig) -> None:
        super().__init__(config)
        self.dispatcher = Dispatcher(config, "validatingwebhookconfigurations", mutating=False)

    def handles(self, res: Resource) -> bool:
        return not exempt(res)

    async def validate(self, a: Attributes) -> None:
        await self.dispatcher.validate(a)
