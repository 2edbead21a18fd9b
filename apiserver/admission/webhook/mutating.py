"""The MutatingAdmissionWebhook admission plugin: MutatingWebhookConfigurations' webhooks, called after
the built-in mutating plugins (upstream's plugin order), their JSONPatches applied to the object."""

from __future__ import annotations

from apiserver.admission.interfaces import CONNECT, CREATE, DELETE, UPDATE, Attributes, MutationInterface, PluginConfig
from apiserver.admission.webhook.dispatch import Dispatcher
from apiserver.admission.webhook.matching import exempt
from services.api.catalog import Resource


class MutatingAdmissionWebhook(MutationInterface):
    name = "MutatingAdmissionWebhook"
    operations = frozenset({CREATE, UPDATE, DELETE, CONNECT})
    subresources = None

    def __init__(self, config: PluginConfig) -> None:
        super().__init__(config)
        self.dispatcher = Dispatcher(config, "mutatingwebhookconfigurations", mutating=True)

    def handles(self, res: Resource) -> bool:
        return not exempt(res)

    async def admit(self, a: Attributes) -> None:
        await self.dispatcher.mutate(a)
