"""Which strategy serves which resource."""

from __future__ import annotations

from apiserver.registry import (
    admissionregistration,
    apiextensions,
    apiregistration,
    apps,
    autoscaling,
    batch,
    certificates,
    core_misc,
    events,
    flowcontrol,
    namespaces,
    networking,
    node,
    pods,
    policy,
    rbac,
    scheduling,
    services,
    storage,
)
from apiserver.registry.strategy import Strategy
from services.api.catalog import Resource

_BY_GROUP_RESOURCE: dict[tuple[str, str], type[Strategy]] = {
    ("", "pods"): pods.PodStrategy,
    ("", "services"): services.ServiceStrategy,
    ("", "namespaces"): namespaces.NamespaceStrategy,
    ("", "nodes"): namespaces.NodeStrategy,
    ("", "configmaps"): core_misc.ConfigMapStrategy,
    ("", "secrets"): core_misc.SecretStrategy,
    ("", "serviceaccounts"): core_misc.ServiceAccountStrategy,
    ("", "events"): events.EventStrategy,
    ("", "persistentvolumes"): core_misc.PersistentVolumeStrategy,
    ("", "persistentvolumeclaims"): core_misc.PersistentVolumeClaimStrategy,
    ("", "limitranges"): core_misc.LimitRangeStrategy,
    ("", "resourcequotas"): core_misc.ResourceQuotaStrategy,
    ("", "replicationcontrollers"): apps.ReplicationControllerStrategy,
    ("", "podtemplates"): core_misc.PodTemplateStrategy,
    ("", "endpoints"): core_misc.EndpointsStrategy,
    ("apps", "deployments"): apps.DeploymentStrategy,
    ("apps", "replicasets"): apps.ReplicaSetStrategy,
    ("apps", "statefulsets"): apps.StatefulSetStrategy,
    ("apps", "daemonsets"): apps.DaemonSetStrategy,
    ("apps", "controllerrevisions"): apps.ControllerRevisionStrategy,
    ("batch", "jobs"): batch.JobStrategy,
    ("batch", "cronjobs"): batch.CronJobStrategy,
    ("autoscaling", "horizontalpodautoscalers"): autoscaling.HorizontalPodAutoscalerStrategy,
    ("coordination.k8s.io", "leases"): events.LeaseStrategy,
    ("discovery.k8s.io", "endpointslices"): networking.EndpointSliceStrategy,
    ("events.k8s.io", "events"): events.EventsV1Strategy,
    ("rbac.authorization.k8s.io", "roles"): rbac.RoleStrategy,
    ("rbac.authorization.k8s.io", "clusterroles"): rbac.ClusterRoleStrategy,
    ("rbac.authorization.k8s.io", "rolebindings"): rbac.RoleBindingStrategy,
    ("rbac.authorization.k8s.io", "clusterrolebindings"): rbac.RoleBindingStrategy,
    ("policy", "poddisruptionbudgets"): policy.PodDisruptionBudgetStrategy,
    ("networking.k8s.io", "ingresses"): networking.IngressStrategy,
    ("networking.k8s.io", "ingressclasses"): networking.IngressClassStrategy,
    ("networking.k8s.io", "networkpolicies"): networking.NetworkPolicyStrategy,
    ("storage.k8s.io", "storageclasses"): storage.StorageClassStrategy,
    ("storage.k8s.io", "csidrivers"): storage.CSIDriverStrategy,
    ("storage.k8s.io", "csistoragecapacities"): storage.CSIStorageCapacityStrategy,
    ("scheduling.k8s.io", "priorityclasses"): scheduling.PriorityClassStrategy,
    ("node.k8s.io", "runtimeclasses"): node.RuntimeClassStrategy,
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"):
        admissionregistration.MutatingWebhookConfigurationStrategy,
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"):
        admissionregistration.ValidatingWebhookConfigurationStrategy,
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"):
        admissionregistration.ValidatingAdmissionPolicyStrategy,
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"):
        admissionregistration.ValidatingAdmissionPolicyBindingStrategy,
    ("flowcontrol.apiserver.k8s.io", "flowschemas"): flowcontrol.FlowSchemaStrategy,
    ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"): flowcontrol.PriorityLevelConfigurationStrategy,
    ("certificates.k8s.io", "certificatesigningrequests"): certificates.CertificateSigningRequestStrategy,
    ("apiextensions.k8s.io", "customresourcedefinitions"): apiextensions.CustomResourceDefinitionStrategy,
    ("apiregistration.k8s.io", "apiservices"): apiregistration.APIServiceStrategy,
}

_CACHE: dict[Resource, Strategy] = {}


def strategy_for(res: Resource) -> Strategy:
    """The strategy for a served resource; custom and unknown resources get the plain base class."""
    if res.custom:
        # Not cached: a CRD update changes the schema without changing the Resource's identity.
        return apiextensions.CustomResourceStrategy(res)
    strategy = _CACHE.get(res)
    if strategy is None:
        strategy = _CACHE[res] = _BY_GROUP_RESOURCE.get(res.group_resource, Strategy)(res)
    return strategy

