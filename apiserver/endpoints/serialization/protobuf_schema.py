"""Field tables for the Kubernetes protobuf wire form of the built-in kinds.

Upstream's protobuf encoding numbers every field of every Go API type; a decoder needs the
number, the JSON name and the Go type of each field. This module holds that knowledge in a
compact form of our own, one string per message:

    "<number> <jsonName>[!] [<type>]" entries separated by commas

* `<type>` defaults to `s` (string). Scalars: `s` string, `i` int32, `l` int64, `b` bool,
  `y` bytes (base64 in JSON). Well-known types: `T` meta.v1.Time, `MT` MicroTime,
  `D` Duration, `Q` resource.Quantity, `IS` intstr.IntOrString, `RAW` runtime.RawExtension,
  `FV` FieldsV1, `SL` a string-list message (authentication/authorization ExtraValue).
  Anything else names a message: looked up in the same package first, then `meta`, then `core`.
* Prefixes: `*` a Go pointer (emitted whenever present, even when zero), `[]` repeated,
  `{}` a map with string keys whose values have the type that follows.
* `!` after the name: the Go field has no `omitempty`, so JSON shows its zero value.
* The name `~` marks an embedded struct that JSON inlines into its parent.

Non-pointer structs (messages and the well-known types) are always present in Go's JSON, so
the decoder fills them in when the wire omits them, as upstream's decode-then-encode does.
Numbers and names follow k8s.io/api and k8s.io/apimachinery at v0.32 (Kubernetes 1.32).
"""

from __future__ import annotations

_CONTAINER = (
    "1 name!, 2 image, 3 command []s, 4 args []s, 5 workingDir, 6 ports []ContainerPort, 7 env []EnvVar,"
    " 8 resources ResourceRequirements, 9 volumeMounts []VolumeMount, 10 livenessProbe *Probe,"
    " 11 readinessProbe *Probe, 12 lifecycle *Lifecycle, 13 terminationMessagePath, 14 imagePullPolicy,"
    " 15 securityContext *SecurityContext, 16 stdin b, 17 stdinOnce b, 18 tty b, 19 envFrom []EnvFromSource,"
    " 20 terminationMessagePolicy, 21 volumeDevices []VolumeDevice, 22 startupProbe *Probe,"
    " 23 resizePolicy []ContainerResizePolicy, 24 restartPolicy *s"
)
_OBJECT = "1 metadata ObjectMeta, 2 spec {0}Spec, 3 status {0}Status"
_CONDITION = "1 type!, 2 status!, 3 lastTransitionTime T, 4 reason, 5 message"
_PROBED_CONDITION = "1 type!, 2 status!, 3 lastProbeTime T, 4 lastTransitionTime T, 5 reason, 6 message"
_SELECTOR_REQUIREMENT = "1 key!, 2 operator!, 3 values []s"
_LOCAL_REF_ITEMS = "1 ~ LocalObjectReference, 2 items []KeyToPath, 4 optional *b"

META: dict[str, str] = {
    "ObjectMeta": (
        "1 name, 2 generateName, 3 namespace, 4 selfLink, 5 uid, 6 resourceVersion, 7 generation l,"
        " 8 creationTimestamp T, 9 deletionTimestamp *T, 10 deletionGracePeriodSeconds *l, 11 labels {}s,"
        " 12 annotations {}s, 13 ownerReferences []OwnerReference, 14 finalizers []s,"
        " 17 managedFields []ManagedFieldsEntry"
    ),
    "OwnerReference": "1 kind!, 3 name!, 4 uid!, 5 apiVersion!, 6 controller *b, 7 blockOwnerDeletion *b",
    "ManagedFieldsEntry": (
        "1 manager, 2 operation, 3 apiVersion, 4 time *T, 6 fieldsType, 7 fieldsV1 *FV, 8 subresource"
    ),
    "LabelSelector": "1 matchLabels {}s, 2 matchExpressions []LabelSelectorRequirement",
    "LabelSelectorRequirement": _SELECTOR_REQUIREMENT,
    "FieldSelectorRequirement": _SELECTOR_REQUIREMENT,
    "Condition": (
        "1 type!, 2 status!, 3 observedGeneration l, 4 lastTransitionTime T, 5 reason!, 6 message!"
    ),
    "DeleteOptions": (
        "1 gracePeriodSeconds *l, 2 preconditions *Preconditions, 3 orphanDependents *b,"
        " 4 propagationPolicy *s, 5 dryRun []s, 6 ignoreStoreReadErrorWithClusterBreakingPotential *b"
    ),
    "Preconditions": "1 uid *s, 2 resourceVersion *s",
}

CORE: dict[str, str] = {
    # Top-level kinds.
    "Namespace": _OBJECT.format("Namespace"),
    "Pod": _OBJECT.format("Pod"),
    "Binding": "1 metadata ObjectMeta, 2 target ObjectReference",
    "Service": _OBJECT.format("Service"),
    "Endpoints": "1 metadata ObjectMeta, 2 subsets []EndpointSubset",
    "Node": _OBJECT.format("Node"),
    "ConfigMap": "1 metadata ObjectMeta, 2 data {}s, 3 binaryData {}y, 4 immutable *b",
    "Secret": "1 metadata ObjectMeta, 2 data {}y, 3 type, 4 stringData {}s, 5 immutable *b",
    "ServiceAccount": (
        "1 metadata ObjectMeta, 2 secrets []ObjectReference, 3 imagePullSecrets []LocalObjectReference,"
        " 4 automountServiceAccountToken *b"
    ),
    "Event": (
        "1 metadata ObjectMeta, 2 involvedObject ObjectReference, 3 reason, 4 message, 5 source EventSource,"
        " 6 firstTimestamp T, 7 lastTimestamp T, 8 count i, 9 type, 10 eventTime MT, 11 series *EventSeries,"
        " 12 action, 13 related *ObjectReference, 14 reportingComponent!, 15 reportingInstance!"
    ),
    "PersistentVolume": _OBJECT.format("PersistentVolume"),
    "PersistentVolumeClaim": _OBJECT.format("PersistentVolumeClaim"),
    "LimitRange": "1 metadata ObjectMeta, 2 spec LimitRangeSpec",
    "ResourceQuota": _OBJECT.format("ResourceQuota"),
    "ReplicationController": _OBJECT.format("ReplicationController"),
    "PodTemplate": "1 metadata ObjectMeta, 2 template PodTemplateSpec",
    "ComponentStatus": "1 metadata ObjectMeta, 2 conditions []ComponentCondition",
    "ComponentCondition": "1 type!, 2 status!, 3 message, 4 error",
    # Namespace.
    "NamespaceSpec": "1 finalizers []s",
    "NamespaceStatus": "1 phase, 2 conditions []NamespaceCondition",
    "NamespaceCondition": "1 type!, 2 status!, 4 lastTransitionTime T, 5 reason, 6 message",
    # Pod spec.
    "PodTemplateSpec": "1 metadata ObjectMeta, 2 spec PodSpec",
    "PodSpec": (
        "1 volumes []Volume, 2 containers! []Container, 3 restartPolicy, 4 terminationGracePeriodSeconds *l,"
        " 5 activeDeadlineSeconds *l, 6 dnsPolicy, 7 nodeSelector {}s, 8 serviceAccountName,"
        " 9 serviceAccount, 10 nodeName, 11 hostNetwork b, 12 hostPID b, 13 hostIPC b,"
        " 14 securityContext *PodSecurityContext, 15 imagePullSecrets []LocalObjectReference, 16 hostname,"
        " 17 subdomain, 18 affinity *Affinity, 19 schedulerName, 20 initContainers []Container,"
        " 21 automountServiceAccountToken *b, 22 tolerations []Toleration, 23 hostAliases []HostAlias,"
        " 24 priorityClassName, 25 priority *i, 26 dnsConfig *PodDNSConfig, 27 shareProcessNamespace *b,"
        " 28 readinessGates []PodReadinessGate, 29 runtimeClassName *s, 30 enableServiceLinks *b,"
        " 31 preemptionPolicy *s, 32 overhead {}Q, 33 topologySpreadConstraints []TopologySpreadConstraint,"
        " 34 ephemeralContainers []EphemeralContainer, 35 setHostnameAsFQDN *b, 36 os *PodOS,"
        " 37 hostUsers *b, 38 schedulingGates []PodSchedulingGate, 39 resourceClaims []PodResourceClaim,"
        " 40 resources *ResourceRequirements"
    ),
    "Container": _CONTAINER,
    "EphemeralContainer": "1 ~ EphemeralContainerCommon, 2 targetContainerName",
    "EphemeralContainerCommon": _CONTAINER,
    "ContainerPort": "1 name, 2 hostPort i, 3 containerPort! i, 4 protocol, 5 hostIP",
    "EnvVar": "1 name!, 2 value, 3 valueFrom *EnvVarSource",
    "EnvVarSource": (
        "1 fieldRef *ObjectFieldSelector, 2 resourceFieldRef *ResourceFieldSelector,"
        " 3 configMapKeyRef *ConfigMapKeySelector, 4 secretKeyRef *SecretKeySelector"
    ),
    "ObjectFieldSelector": "1 apiVersion, 2 fieldPath!",
    "ResourceFieldSelector": "1 containerName, 2 resource!, 3 divisor Q",
    "ConfigMapKeySelector": "1 ~ LocalObjectReference, 2 key!, 3 optional *b",
    "SecretKeySelector": "1 ~ LocalObjectReference, 2 key!, 3 optional *b",
    "EnvFromSource": "1 prefix, 2 configMapRef *ConfigMapEnvSource, 3 secretRef *SecretEnvSource",
    "ConfigMapEnvSource": "1 ~ LocalObjectReference, 2 optional *b",
    "SecretEnvSource": "1 ~ LocalObjectReference, 2 optional *b",
    "ResourceRequirements": "1 limits {}Q, 2 requests {}Q, 3 claims []ResourceClaim",
    "ResourceClaim": "1 name!, 2 request",
    "VolumeMount": (
        "1 name!, 2 readOnly b, 3 mountPath!, 4 subPath, 5 mountPropagation *s, 6 subPathExpr,"
        " 7 recursiveReadOnly *s"
    ),
    "VolumeDevice": "1 name!, 2 devicePath!",
    "ContainerResizePolicy": "1 resourceName!, 2 restartPolicy!",
    "Probe": (
        "1 ~ ProbeHandler, 2 initialDelaySeconds i, 3 timeoutSeconds i, 4 periodSeconds i,"
        " 5 successThreshold i, 6 failureThreshold i, 7 terminationGracePeriodSeconds *l"
    ),
    "ProbeHandler": "1 exec *ExecAction, 2 httpGet *HTTPGetAction, 3 tcpSocket *TCPSocketAction, 4 grpc *GRPCAction",
    "LifecycleHandler": (
        "1 exec *ExecAction, 2 httpGet *HTTPGetAction, 3 tcpSocket *TCPSocketAction, 4 sleep *SleepAction"
    ),
    "Lifecycle": "1 postStart *LifecycleHandler, 2 preStop *LifecycleHandler",
    "ExecAction": "1 command []s",
    "HTTPGetAction": "1 path, 2 port IS, 3 host, 4 scheme, 5 httpHeaders []HTTPHeader",
    "HTTPHeader": "1 name!, 2 value!",
    "TCPSocketAction": "1 port IS, 2 host",
    "GRPCAction": "1 port! i, 2 service! *s",
    "SleepAction": "1 seconds! l",
    "SecurityContext": (
        "1 capabilities *Capabilities, 2 privileged *b, 3 seLinuxOptions *SELinuxOptions, 4 runAsUser *l,"
        " 5 runAsNonRoot *b, 6 readOnlyRootFilesystem *b, 7 allowPrivilegeEscalation *b, 8 runAsGroup *l,"
        " 9 procMount *s, 10 windowsOptions *WindowsSecurityContextOptions, 11 seccompProfile *SeccompProfile,"
        " 12 appArmorProfile *AppArmorProfile"
    ),
    "Capabilities": "1 add []s, 2 drop []s",
    "SELinuxOptions": "1 user, 2 role, 3 type, 4 level",
    "WindowsSecurityContextOptions": (
        "1 gmsaCredentialSpecName *s, 2 gmsaCredentialSpec *s, 3 runAsUserName *s, 4 hostProcess *b"
    ),
    "SeccompProfile": "1 type!, 2 localhostProfile *s",
    "AppArmorProfile": "1 type!, 2 localhostProfile *s",
    "PodSecurityContext": (
        "1 seLinuxOptions *SELinuxOptions, 2 runAsUser *l, 3 runAsNonRoot *b, 4 supplementalGroups []l,"
        " 5 fsGroup *l, 6 runAsGroup *l, 7 sysctls []Sysctl, 8 windowsOptions *WindowsSecurityContextOptions,"
        " 9 fsGroupChangePolicy *s, 10 seccompProfile *SeccompProfile, 11 appArmorProfile *AppArmorProfile,"
        " 12 supplementalGroupsPolicy *s, 13 seLinuxChangePolicy *s"
    ),
    "Sysctl": "1 name!, 2 value!",
    "Affinity": "1 nodeAffinity *NodeAffinity, 2 podAffinity *PodAffinity, 3 podAntiAffinity *PodAntiAffinity",
    "NodeAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution *NodeSelector,"
        " 2 preferredDuringSchedulingIgnoredDuringExecution []PreferredSchedulingTerm"
    ),
    "PodAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution []PodAffinityTerm,"
        " 2 preferredDuringSchedulingIgnoredDuringExecution []WeightedPodAffinityTerm"
    ),
    "PodAntiAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution []PodAffinityTerm,"
        " 2 preferredDuringSchedulingIgnoredDuringExecution []WeightedPodAffinityTerm"
    ),
    "NodeSelector": "1 nodeSelectorTerms! []NodeSelectorTerm",
    "NodeSelectorTerm": "1 matchExpressions []NodeSelectorRequirement, 2 matchFields []NodeSelectorRequirement",
    "NodeSelectorRequirement": _SELECTOR_REQUIREMENT,
    "PreferredSchedulingTerm": "1 weight! i, 2 preference NodeSelectorTerm",
    "PodAffinityTerm": (
        "1 labelSelector *LabelSelector, 2 namespaces []s, 3 topologyKey!, 4 namespaceSelector *LabelSelector,"
        " 5 matchLabelKeys []s, 6 mismatchLabelKeys []s"
    ),
    "WeightedPodAffinityTerm": "1 weight! i, 2 podAffinityTerm PodAffinityTerm",
    "Toleration": "1 key, 2 operator, 3 value, 4 effect, 5 tolerationSeconds *l",
    "HostAlias": "1 ip!, 2 hostnames []s",
    "PodDNSConfig": "1 nameservers []s, 2 searches []s, 3 options []PodDNSConfigOption",
    "PodDNSConfigOption": "1 name, 2 value *s",
    "PodReadinessGate": "1 conditionType!",
    "TopologySpreadConstraint": (
        "1 maxSkew! i, 2 topologyKey!, 3 whenUnsatisfiable!, 4 labelSelector *LabelSelector, 5 minDomains *i,"
        " 6 nodeAffinityPolicy *s, 7 nodeTaintsPolicy *s, 8 matchLabelKeys []s"
    ),
    "PodOS": "1 name!",
    "PodSchedulingGate": "1 name!",
    "PodResourceClaim": "1 name!, 3 resourceClaimName *s, 4 resourceClaimTemplateName *s",
    "LocalObjectReference": "1 name",
    # Volumes.
    "Volume": "1 name!, 2 ~ VolumeSource",
    "VolumeSource": (
        "1 hostPath *HostPathVolumeSource, 2 emptyDir *EmptyDirVolumeSource,"
        " 3 gcePersistentDisk *GCEPersistentDiskVolumeSource,"
        " 4 awsElasticBlockStore *AWSElasticBlockStoreVolumeSource, 5 gitRepo *GitRepoVolumeSource,"
        " 6 secret *SecretVolumeSource, 7 nfs *NFSVolumeSource, 8 iscsi *ISCSIVolumeSource,"
        " 9 glusterfs *GlusterfsVolumeSource, 10 persistentVolumeClaim *PersistentVolumeClaimVolumeSource,"
        " 11 rbd *RBDVolumeSource, 12 flexVolume *FlexVolumeSource, 13 cinder *CinderVolumeSource,"
        " 14 cephfs *CephFSVolumeSource, 15 flocker *FlockerVolumeSource,"
        " 16 downwardAPI *DownwardAPIVolumeSource, 17 fc *FCVolumeSource, 18 azureFile *AzureFileVolumeSource,"
        " 19 configMap *ConfigMapVolumeSource, 20 vsphereVolume *VsphereVirtualDiskVolumeSource,"
        " 21 quobyte *QuobyteVolumeSource, 22 azureDisk *AzureDiskVolumeSource,"
        " 23 photonPersistentDisk *PhotonPersistentDiskVolumeSource, 24 portworxVolume *PortworxVolumeSource,"
        " 25 scaleIO *ScaleIOVolumeSource, 26 projected *ProjectedVolumeSource,"
        " 27 storageos *StorageOSVolumeSource, 28 csi *CSIVolumeSource, 29 ephemeral *EphemeralVolumeSource,"
        " 30 image *ImageVolumeSource"
    ),
    "HostPathVolumeSource": "1 path!, 2 type *s",
    "EmptyDirVolumeSource": "1 medium, 2 sizeLimit *Q",
    "GCEPersistentDiskVolumeSource": "1 pdName!, 2 fsType, 3 partition i, 4 readOnly b",
    "AWSElasticBlockStoreVolumeSource": "1 volumeID!, 2 fsType, 3 partition i, 4 readOnly b",
    "GitRepoVolumeSource": "1 repository!, 2 revision, 3 directory",
    "SecretVolumeSource": "1 secretName, 2 items []KeyToPath, 3 defaultMode *i, 4 optional *b",
    "KeyToPath": "1 key!, 2 path!, 3 mode *i",
    "NFSVolumeSource": "1 server!, 2 path!, 3 readOnly b",
    "ISCSIVolumeSource": (
        "1 targetPortal!, 2 iqn!, 3 lun! i, 4 iscsiInterface, 5 fsType, 6 readOnly b, 7 portals []s,"
        " 8 chapAuthDiscovery b, 10 secretRef *LocalObjectReference, 11 chapAuthSession b, 12 initiatorName *s"
    ),
    "GlusterfsVolumeSource": "1 endpoints!, 2 path!, 3 readOnly b",
    "PersistentVolumeClaimVolumeSource": "1 claimName!, 2 readOnly b",
    "RBDVolumeSource": (
        "1 monitors! []s, 2 image!, 3 fsType, 4 pool, 5 user, 6 keyring, 7 secretRef *LocalObjectReference,"
        " 8 readOnly b"
    ),
    "FlexVolumeSource": (
        "1 driver!, 2 fsType, 3 secretRef *LocalObjectReference, 4 readOnly b, 5 options {}s"
    ),
    "CinderVolumeSource": "1 volumeID!, 2 fsType, 3 readOnly b, 4 secretRef *LocalObjectReference",
    "CephFSVolumeSource": (
        "1 monitors! []s, 2 path, 3 user, 4 secretFile, 5 secretRef *LocalObjectReference, 6 readOnly b"
    ),
    "FlockerVolumeSource": "1 datasetName, 2 datasetUUID",
    "DownwardAPIVolumeSource": "1 items []DownwardAPIVolumeFile, 2 defaultMode *i",
    "DownwardAPIVolumeFile": (
        "1 path!, 2 fieldRef *ObjectFieldSelector, 3 resourceFieldRef *ResourceFieldSelector, 4 mode *i"
    ),
    "FCVolumeSource": "1 targetWWNs []s, 2 lun *i, 3 fsType, 4 readOnly b, 5 wwids []s",
    "AzureFileVolumeSource": "1 secretName!, 2 shareName!, 3 readOnly b",
    "ConfigMapVolumeSource": "1 ~ LocalObjectReference, 2 items []KeyToPath, 3 defaultMode *i, 4 optional *b",
    "VsphereVirtualDiskVolumeSource": "1 volumePath!, 2 fsType, 3 storagePolicyName, 4 storagePolicyID",
    "QuobyteVolumeSource": "1 registry!, 2 volume!, 3 readOnly b, 4 user, 5 group, 6 tenant",
    "AzureDiskVolumeSource": (
        "1 diskName!, 2 diskURI!, 3 cachingMode *s, 4 fsType *s, 5 readOnly *b, 6 kind *s"
    ),
    "PhotonPersistentDiskVolumeSource": "1 pdID!, 2 fsType",
    "PortworxVolumeSource": "1 volumeID!, 2 fsType, 3 readOnly b",
    "ScaleIOVolumeSource": (
        "1 gateway!, 2 system!, 3 secretRef! *LocalObjectReference, 4 sslEnabled b, 5 protectionDomain,"
        " 6 storagePool, 7 storageMode, 8 volumeName, 9 fsType, 10 readOnly b"
    ),
    "ProjectedVolumeSource": "1 sources! []VolumeProjection, 2 defaultMode *i",
    "VolumeProjection": (
        "1 secret *SecretProjection, 2 downwardAPI *DownwardAPIProjection, 3 configMap *ConfigMapProjection,"
        " 4 serviceAccountToken *ServiceAccountTokenProjection,"
        " 5 clusterTrustBundle *ClusterTrustBundleProjection"
    ),
    "SecretProjection": _LOCAL_REF_ITEMS,
    "ConfigMapProjection": _LOCAL_REF_ITEMS,
    "DownwardAPIProjection": "1 items []DownwardAPIVolumeFile",
    "ServiceAccountTokenProjection": "1 audience, 2 expirationSeconds *l, 3 path!",
    "ClusterTrustBundleProjection": (
        "1 name *s, 2 signerName *s, 3 labelSelector *LabelSelector, 4 path!, 5 optional *b"
    ),
    "StorageOSVolumeSource": (
        "1 volumeName, 2 volumeNamespace, 3 fsType, 4 readOnly b, 5 secretRef *LocalObjectReference"
    ),
    "CSIVolumeSource": (
        "1 driver!, 2 readOnly *b, 3 fsType *s, 4 volumeAttributes {}s, 5 nodePublishSecretRef *LocalObjectReference"
    ),
    "EphemeralVolumeSource": "1 volumeClaimTemplate *PersistentVolumeClaimTemplate",
    "PersistentVolumeClaimTemplate": "1 metadata ObjectMeta, 2 spec PersistentVolumeClaimSpec",
    "ImageVolumeSource": "1 reference, 2 pullPolicy",
    # Pod status.
    "PodStatus": (
        "1 phase, 2 conditions []PodCondition, 3 message, 4 reason, 5 hostIP, 6 podIP, 7 startTime *T,"
        " 8 containerStatuses []ContainerStatus, 9 qosClass, 10 initContainerStatuses []ContainerStatus,"
        " 11 nominatedNodeName, 12 podIPs []PodIP, 13 ephemeralContainerStatuses []ContainerStatus,"
        " 14 resize, 15 resourceClaimStatuses []PodResourceClaimStatus, 16 hostIPs []HostIP"
    ),
    "PodCondition": _PROBED_CONDITION,
    "PodIP": "1 ip!",
    "HostIP": "1 ip!",
    "PodResourceClaimStatus": "1 name!, 2 resourceClaimName *s",
    "ContainerStatus": (
        "1 name!, 2 state ContainerState, 3 lastState ContainerState, 4 ready! b, 5 restartCount! i, 6 image!,"
        " 7 imageID!, 8 containerID, 9 started *b, 10 allocatedResources {}Q, 11 resources *ResourceRequirements,"
        " 12 volumeMounts []VolumeMountStatus, 13 user *ContainerUser,"
        " 14 allocatedResourcesStatus []ResourceStatus"
    ),
    "ContainerState": (
        "1 waiting *ContainerStateWaiting, 2 running *ContainerStateRunning,"
        " 3 terminated *ContainerStateTerminated"
    ),
    "ContainerStateWaiting": "1 reason, 2 message",
    "ContainerStateRunning": "1 startedAt T",
    "ContainerStateTerminated": (
        "1 exitCode! i, 2 signal i, 3 reason, 4 message, 5 startedAt T, 6 finishedAt T, 7 containerID"
    ),
    "VolumeMountStatus": "1 name!, 2 mountPath!, 3 readOnly b, 4 recursiveReadOnly *s",
    "ContainerUser": "1 linux *LinuxContainerUser",
    "LinuxContainerUser": "1 uid! l, 2 gid! l, 3 supplementalGroups []l",
    "ResourceStatus": "1 name!, 2 resources []ResourceHealth",
    "ResourceHealth": "1 resourceID!, 2 health",
    # References and events.
    "ObjectReference": "1 kind, 2 namespace, 3 name, 4 uid, 5 apiVersion, 6 resourceVersion, 7 fieldPath",
    "TypedLocalObjectReference": "1 apiGroup! *s, 2 kind!, 3 name!",
    "TypedObjectReference": "1 apiGroup! *s, 2 kind!, 3 name!, 4 namespace *s",
    "SecretReference": "1 name, 2 namespace",
    "EventSource": "1 component, 2 host",
    "EventSeries": "1 count i, 2 lastObservedTime MT",
    # Service and endpoints.
    "ServiceSpec": (
        "1 ports []ServicePort, 2 selector {}s, 3 clusterIP, 4 type, 5 externalIPs []s, 7 sessionAffinity,"
        " 8 loadBalancerIP, 9 loadBalancerSourceRanges []s, 10 externalName, 11 externalTrafficPolicy,"
        " 12 healthCheckNodePort i, 13 publishNotReadyAddresses b,"
        " 14 sessionAffinityConfig *SessionAffinityConfig, 17 ipFamilyPolicy *s, 18 clusterIPs []s,"
        " 19 ipFamilies []s, 20 allocateLoadBalancerNodePorts *b, 21 loadBalancerClass *s,"
        " 22 internalTrafficPolicy *s, 23 trafficDistribution *s"
    ),
    "ServicePort": "1 name, 2 protocol, 3 port! i, 4 targetPort IS, 5 nodePort i, 6 appProtocol *s",
    "SessionAffinityConfig": "1 clientIP *ClientIPConfig",
    "ClientIPConfig": "1 timeoutSeconds *i",
    "ServiceStatus": "1 loadBalancer LoadBalancerStatus, 2 conditions []Condition",
    "LoadBalancerStatus": "1 ingress []LoadBalancerIngress",
    "LoadBalancerIngress": "1 ip, 2 hostname, 3 ipMode *s, 4 ports []PortStatus",
    "PortStatus": "1 port! i, 2 protocol!, 3 error *s",
    "EndpointSubset": (
        "1 addresses []EndpointAddress, 2 notReadyAddresses []EndpointAddress, 3 ports []EndpointPort"
    ),
    "EndpointAddress": "1 ip!, 2 targetRef *ObjectReference, 3 hostname, 4 nodeName *s",
    "EndpointPort": "1 name, 2 port! i, 3 protocol, 4 appProtocol *s",
    # Node.
    "NodeSpec": (
        "1 podCIDR, 2 externalID, 3 providerID, 4 unschedulable b, 5 taints []Taint,"
        " 6 configSource *NodeConfigSource, 7 podCIDRs []s"
    ),
    "Taint": "1 key!, 2 value, 3 effect!, 4 timeAdded *T",
    "NodeConfigSource": "2 configMap *ConfigMapNodeConfigSource",
    "ConfigMapNodeConfigSource": "1 namespace!, 2 name!, 3 uid, 4 resourceVersion, 5 kubeletConfigKey!",
    "NodeStatus": (
        "1 capacity {}Q, 2 allocatable {}Q, 3 phase, 4 conditions []NodeCondition, 5 addresses []NodeAddress,"
        " 6 daemonEndpoints NodeDaemonEndpoints, 7 nodeInfo NodeSystemInfo, 8 images []ContainerImage,"
        " 9 volumesInUse []s, 10 volumesAttached []AttachedVolume, 11 config *NodeConfigStatus,"
        " 12 runtimeHandlers []NodeRuntimeHandler, 13 features *NodeFeatures"
    ),
    "NodeCondition": (
        "1 type!, 2 status!, 3 lastHeartbeatTime T, 4 lastTransitionTime T, 5 reason, 6 message"
    ),
    "NodeAddress": "1 type!, 2 address!",
    "NodeDaemonEndpoints": "1 kubeletEndpoint DaemonEndpoint",
    "DaemonEndpoint": "1 Port! i",
    "NodeSystemInfo": (
        "1 machineID!, 2 systemUUID!, 3 bootID!, 4 kernelVersion!, 5 osImage!, 6 containerRuntimeVersion!,"
        " 7 kubeletVersion!, 8 kubeProxyVersion!, 9 operatingSystem!, 10 architecture!"
    ),
    "ContainerImage": "1 names! []s, 2 sizeBytes l",
    "AttachedVolume": "1 name!, 2 devicePath!",
    "NodeConfigStatus": (
        "1 assigned *NodeConfigSource, 2 active *NodeConfigSource, 3 lastKnownGood *NodeConfigSource, 4 error"
    ),
    "NodeRuntimeHandler": "1 name!, 2 features *NodeRuntimeHandlerFeatures",
    "NodeRuntimeHandlerFeatures": "1 recursiveReadOnlyMounts *b, 2 userNamespaces *b",
    "NodeFeatures": "1 supplementalGroupsPolicy *b",
    # Persistent volumes.
    "PersistentVolumeSpec": (
        "1 capacity {}Q, 2 ~ PersistentVolumeSource, 3 accessModes []s, 4 claimRef *ObjectReference,"
        " 5 persistentVolumeReclaimPolicy, 6 storageClassName, 7 mountOptions []s, 8 volumeMode *s,"
        " 9 nodeAffinity *VolumeNodeAffinity, 10 volumeAttributesClassName *s"
    ),
    "PersistentVolumeSource": (
        "1 gcePersistentDisk *GCEPersistentDiskVolumeSource,"
        " 2 awsElasticBlockStore *AWSElasticBlockStoreVolumeSource, 3 hostPath *HostPathVolumeSource,"
        " 4 glusterfs *GlusterfsPersistentVolumeSource, 5 nfs *NFSVolumeSource,"
        " 6 rbd *RBDPersistentVolumeSource, 7 iscsi *ISCSIPersistentVolumeSource,"
        " 8 cinder *CinderPersistentVolumeSource, 9 cephfs *CephFSPersistentVolumeSource, 10 fc *FCVolumeSource,"
        " 11 flocker *FlockerVolumeSource, 12 flexVolume *FlexPersistentVolumeSource,"
        " 13 azureFile *AzureFilePersistentVolumeSource, 14 vsphereVolume *VsphereVirtualDiskVolumeSource,"
        " 15 quobyte *QuobyteVolumeSource, 16 azureDisk *AzureDiskVolumeSource,"
        " 17 photonPersistentDisk *PhotonPersistentDiskVolumeSource, 18 portworxVolume *PortworxVolumeSource,"
        " 19 scaleIO *ScaleIOPersistentVolumeSource, 20 local *LocalVolumeSource,"
        " 21 storageos *StorageOSPersistentVolumeSource, 22 csi *CSIPersistentVolumeSource"
    ),
    "GlusterfsPersistentVolumeSource": "1 endpoints!, 2 path!, 3 readOnly b, 4 endpointsNamespace *s",
    "RBDPersistentVolumeSource": (
        "1 monitors! []s, 2 image!, 3 fsType, 4 pool, 5 user, 6 keyring, 7 secretRef *SecretReference,"
        " 8 readOnly b"
    ),
    "ISCSIPersistentVolumeSource": (
        "1 targetPortal!, 2 iqn!, 3 lun! i, 4 iscsiInterface, 5 fsType, 6 readOnly b, 7 portals []s,"
        " 8 chapAuthDiscovery b, 10 secretRef *SecretReference, 11 chapAuthSession b, 12 initiatorName *s"
    ),
    "CinderPersistentVolumeSource": "1 volumeID!, 2 fsType, 3 readOnly b, 4 secretRef *SecretReference",
    "CephFSPersistentVolumeSource": (
        "1 monitors! []s, 2 path, 3 user, 4 secretFile, 5 secretRef *SecretReference, 6 readOnly b"
    ),
    "FlexPersistentVolumeSource": (
        "1 driver!, 2 fsType, 3 secretRef *SecretReference, 4 readOnly b, 5 options {}s"
    ),
    "AzureFilePersistentVolumeSource": "1 secretName!, 2 shareName!, 3 readOnly b, 4 secretNamespace! *s",
    "ScaleIOPersistentVolumeSource": (
        "1 gateway!, 2 system!, 3 secretRef! *SecretReference, 4 sslEnabled b, 5 protectionDomain,"
        " 6 storagePool, 7 storageMode, 8 volumeName, 9 fsType, 10 readOnly b"
    ),
    "LocalVolumeSource": "1 path!, 2 fsType *s",
    "StorageOSPersistentVolumeSource": (
        "1 volumeName, 2 volumeNamespace, 3 fsType, 4 readOnly b, 5 secretRef *ObjectReference"
    ),
    "CSIPersistentVolumeSource": (
        "1 driver!, 2 volumeHandle!, 3 readOnly b, 4 fsType, 5 volumeAttributes {}s,"
        " 6 controllerPublishSecretRef *SecretReference, 7 nodeStageSecretRef *SecretReference,"
        " 8 nodePublishSecretRef *SecretReference, 9 controllerExpandSecretRef *SecretReference,"
        " 10 nodeExpandSecretRef *SecretReference"
    ),
    "VolumeNodeAffinity": "1 required *NodeSelector",
    "PersistentVolumeStatus": "1 phase, 2 message, 3 reason, 4 lastPhaseTransitionTime *T",
    "PersistentVolumeClaimSpec": (
        "1 accessModes []s, 2 resources VolumeResourceRequirements, 3 volumeName, 4 selector *LabelSelector,"
        " 5 storageClassName *s, 6 volumeMode *s, 7 dataSource *TypedLocalObjectReference,"
        " 8 dataSourceRef *TypedObjectReference, 9 volumeAttributesClassName *s"
    ),
    "VolumeResourceRequirements": "1 limits {}Q, 2 requests {}Q",
    "PersistentVolumeClaimStatus": (
        "1 phase, 2 accessModes []s, 3 capacity {}Q, 4 conditions []PersistentVolumeClaimCondition,"
        " 5 allocatedResources {}Q, 7 allocatedResourceStatuses {}s, 8 currentVolumeAttributesClassName *s,"
        " 9 modifyVolumeStatus *ModifyVolumeStatus"
    ),
    "PersistentVolumeClaimCondition": _PROBED_CONDITION,
    "ModifyVolumeStatus": "1 targetVolumeAttributesClassName, 2 status!",
    "TopologySelectorTerm": "1 matchLabelExpressions []TopologySelectorLabelRequirement",
    "TopologySelectorLabelRequirement": "1 key!, 2 values! []s",
    # Quotas, limits, replication controllers.
    "LimitRangeSpec": "1 limits! []LimitRangeItem",
    "LimitRangeItem": (
        "1 type!, 2 max {}Q, 3 min {}Q, 4 default {}Q, 5 defaultRequest {}Q, 6 maxLimitRequestRatio {}Q"
    ),
    "ResourceQuotaSpec": "1 hard {}Q, 2 scopes []s, 3 scopeSelector *ScopeSelector",
    "ScopeSelector": "1 matchExpressions []ScopedResourceSelectorRequirement",
    "ScopedResourceSelectorRequirement": "1 scopeName!, 2 operator!, 3 values []s",
    "ResourceQuotaStatus": "1 hard {}Q, 2 used {}Q",
    "ReplicationControllerSpec": (
        "1 replicas *i, 2 selector {}s, 3 template *PodTemplateSpec, 4 minReadySeconds i"
    ),
    "ReplicationControllerStatus": (
        "1 replicas! i, 2 fullyLabeledReplicas i, 3 observedGeneration l, 4 readyReplicas i,"
        " 5 availableReplicas i, 6 conditions []ReplicationControllerCondition"
    ),
    "ReplicationControllerCondition": _CONDITION,
}

APPS: dict[str, str] = {
    "Deployment": _OBJECT.format("Deployment"),
    "ReplicaSet": _OBJECT.format("ReplicaSet"),
    "StatefulSet": _OBJECT.format("StatefulSet"),
    "DaemonSet": _OBJECT.format("DaemonSet"),
    "ControllerRevision": "1 metadata ObjectMeta, 2 data RAW, 3 revision! l",
    "DeploymentSpec": (
        "1 replicas *i, 2 selector! *LabelSelector, 3 template PodTemplateSpec, 4 strategy DeploymentStrategy,"
        " 5 minReadySeconds i, 6 revisionHistoryLimit *i, 7 paused b, 9 progressDeadlineSeconds *i"
    ),
    "DeploymentStrategy": "1 type, 2 rollingUpdate *RollingUpdateDeployment",
    "RollingUpdateDeployment": "1 maxUnavailable *IS, 2 maxSurge *IS",
    "DeploymentStatus": (
        "1 observedGeneration l, 2 replicas i, 3 updatedReplicas i, 4 availableReplicas i,"
        " 5 unavailableReplicas i, 6 conditions []DeploymentCondition, 7 readyReplicas i, 8 collisionCount *i"
    ),
    "DeploymentCondition": (
        "1 type!, 2 status!, 4 reason, 5 message, 6 lastUpdateTime T, 7 lastTransitionTime T"
    ),
    "ReplicaSetSpec": (
        "1 replicas *i, 2 selector! *LabelSelector, 3 template PodTemplateSpec, 4 minReadySeconds i"
    ),
    "ReplicaSetStatus": (
        "1 replicas! i, 2 fullyLabeledReplicas i, 3 observedGeneration l, 4 readyReplicas i,"
        " 5 availableReplicas i, 6 conditions []ReplicaSetCondition"
    ),
    "ReplicaSetCondition": _CONDITION,
    "StatefulSetSpec": (
        "1 replicas *i, 2 selector! *LabelSelector, 3 template PodTemplateSpec,"
        " 4 volumeClaimTemplates []PersistentVolumeClaim, 5 serviceName!, 6 podManagementPolicy,"
        " 7 updateStrategy StatefulSetUpdateStrategy, 8 revisionHistoryLimit *i, 9 minReadySeconds i,"
        " 10 persistentVolumeClaimRetentionPolicy *StatefulSetPersistentVolumeClaimRetentionPolicy,"
        " 11 ordinals *StatefulSetOrdinals"
    ),
    "StatefulSetUpdateStrategy": "1 type, 2 rollingUpdate *RollingUpdateStatefulSetStrategy",
    "RollingUpdateStatefulSetStrategy": "1 partition *i, 2 maxUnavailable *IS",
    "StatefulSetPersistentVolumeClaimRetentionPolicy": "1 whenDeleted, 2 whenScaled",
    "StatefulSetOrdinals": "1 start! i",
    "StatefulSetStatus": (
        "1 observedGeneration l, 2 replicas! i, 3 readyReplicas i, 4 currentReplicas i, 5 updatedReplicas i,"
        " 6 currentRevision, 7 updateRevision, 9 collisionCount *i, 10 conditions []StatefulSetCondition,"
        " 11 availableReplicas! i"
    ),
    "StatefulSetCondition": _CONDITION,
    "DaemonSetSpec": (
        "1 selector! *LabelSelector, 2 template PodTemplateSpec, 3 updateStrategy DaemonSetUpdateStrategy,"
        " 4 minReadySeconds i, 6 revisionHistoryLimit *i"
    ),
    "DaemonSetUpdateStrategy": "1 type, 2 rollingUpdate *RollingUpdateDaemonSet",
    "RollingUpdateDaemonSet": "1 maxUnavailable *IS, 2 maxSurge *IS",
    "DaemonSetStatus": (
        "1 currentNumberScheduled! i, 2 numberMisscheduled! i, 3 desiredNumberScheduled! i, 4 numberReady! i,"
        " 5 observedGeneration l, 6 updatedNumberScheduled i, 7 numberAvailable i, 8 numberUnavailable i,"
        " 9 collisionCount *i, 10 conditions []DaemonSetCondition"
    ),
    "DaemonSetCondition": _CONDITION,
}

BATCH: dict[str, str] = {
    "Job": _OBJECT.format("Job"),
    "CronJob": _OBJECT.format("CronJob"),
    "JobSpec": (
        "1 parallelism *i, 2 completions *i, 3 activeDeadlineSeconds *l, 4 selector *LabelSelector,"
        " 5 manualSelector *b, 6 template PodTemplateSpec, 7 backoffLimit *i, 8 ttlSecondsAfterFinished *i,"
        " 9 completionMode *s, 10 suspend *b, 11 podFailurePolicy *PodFailurePolicy, 12 backoffLimitPerIndex *i,"
        " 13 maxFailedIndexes *i, 14 podReplacementPolicy *s, 15 managedBy *s, 16 successPolicy *SuccessPolicy"
    ),
    "PodFailurePolicy": "1 rules! []PodFailurePolicyRule",
    "PodFailurePolicyRule": (
        "1 action!, 2 onExitCodes *PodFailurePolicyOnExitCodesRequirement,"
        " 3 onPodConditions []PodFailurePolicyOnPodConditionsPattern"
    ),
    "PodFailurePolicyOnExitCodesRequirement": "1 containerName *s, 2 operator!, 3 values! []i",
    "PodFailurePolicyOnPodConditionsPattern": "1 type!, 2 status!",
    "SuccessPolicy": "1 rules! []SuccessPolicyRule",
    "SuccessPolicyRule": "1 succeededIndexes *s, 2 succeededCount *i",
    "JobStatus": (
        "1 conditions []JobCondition, 2 startTime *T, 3 completionTime *T, 4 active i, 5 succeeded i, 6 failed i,"
        " 7 completedIndexes, 8 uncountedTerminatedPods *UncountedTerminatedPods, 9 ready *i,"
        " 10 failedIndexes *s, 11 terminating *i"
    ),
    "JobCondition": _PROBED_CONDITION,
    "UncountedTerminatedPods": "1 succeeded []s, 2 failed []s",
    "CronJobSpec": (
        "1 schedule!, 2 startingDeadlineSeconds *l, 3 concurrencyPolicy, 4 suspend *b,"
        " 5 jobTemplate JobTemplateSpec, 6 successfulJobsHistoryLimit *i, 7 failedJobsHistoryLimit *i,"
        " 8 timeZone *s"
    ),
    "JobTemplateSpec": "1 metadata ObjectMeta, 2 spec JobSpec",
    "CronJobStatus": "1 active []ObjectReference, 4 lastScheduleTime *T, 5 lastSuccessfulTime *T",
}

AUTOSCALING_V1: dict[str, str] = {
    "HorizontalPodAutoscaler": _OBJECT.format("HorizontalPodAutoscaler"),
    "Scale": _OBJECT.format("Scale"),
    "HorizontalPodAutoscalerSpec": (
        "1 scaleTargetRef CrossVersionObjectReference, 2 minReplicas *i, 3 maxReplicas! i,"
        " 4 targetCPUUtilizationPercentage *i"
    ),
    "HorizontalPodAutoscalerStatus": (
        "1 observedGeneration *l, 2 lastScaleTime *T, 3 currentReplicas! i, 4 desiredReplicas! i,"
        " 5 currentCPUUtilizationPercentage *i"
    ),
    "CrossVersionObjectReference": "1 kind!, 2 name!, 3 apiVersion",
    "ScaleSpec": "1 replicas i",
    "ScaleStatus": "1 replicas! i, 2 selector",
}

_METRIC_SOURCES = (
    "1 type!, 2 object *Object{0}, 3 pods *Pods{0}, 4 resource *Resource{0}, 5 external *External{0},"
    " 7 containerResource *ContainerResource{0}"
)

AUTOSCALING_V2: dict[str, str] = {
    "HorizontalPodAutoscaler": _OBJECT.format("HorizontalPodAutoscaler"),
    "HorizontalPodAutoscalerSpec": (
        "1 scaleTargetRef CrossVersionObjectReference, 2 minReplicas *i, 3 maxReplicas! i,"
        " 4 metrics []MetricSpec, 5 behavior *HorizontalPodAutoscalerBehavior"
    ),
    "CrossVersionObjectReference": "1 kind!, 2 name!, 3 apiVersion",
    "MetricSpec": _METRIC_SOURCES.format("MetricSource"),
    "ObjectMetricSource": (
        "1 describedObject CrossVersionObjectReference, 2 target MetricTarget, 3 metric MetricIdentifier"
    ),
    "PodsMetricSource": "1 metric MetricIdentifier, 2 target MetricTarget",
    "ResourceMetricSource": "1 name!, 2 target MetricTarget",
    "ContainerResourceMetricSource": "1 name!, 2 target MetricTarget, 3 container!",
    "ExternalMetricSource": "1 metric MetricIdentifier, 2 target MetricTarget",
    "MetricIdentifier": "1 name!, 2 selector *LabelSelector",
    "MetricTarget": "1 type!, 2 value *Q, 3 averageValue *Q, 4 averageUtilization *i",
    "HorizontalPodAutoscalerBehavior": "1 scaleUp *HPAScalingRules, 2 scaleDown *HPAScalingRules",
    "HPAScalingRules": "1 selectPolicy *s, 2 policies []HPAScalingPolicy, 3 stabilizationWindowSeconds *i",
    "HPAScalingPolicy": "1 type!, 2 value! i, 3 periodSeconds! i",
    "HorizontalPodAutoscalerStatus": (
        "1 observedGeneration *l, 2 lastScaleTime *T, 3 currentReplicas i, 4 desiredReplicas! i,"
        " 5 currentMetrics! []MetricStatus, 6 conditions []HorizontalPodAutoscalerCondition"
    ),
    "MetricStatus": _METRIC_SOURCES.format("MetricStatus"),
    "ObjectMetricStatus": (
        "1 metric MetricIdentifier, 2 current MetricValueStatus, 3 describedObject CrossVersionObjectReference"
    ),
    "PodsMetricStatus": "1 metric MetricIdentifier, 2 current MetricValueStatus",
    "ResourceMetricStatus": "1 name!, 2 current MetricValueStatus",
    "ContainerResourceMetricStatus": "1 name!, 2 current MetricValueStatus, 3 container!",
    "ExternalMetricStatus": "1 metric MetricIdentifier, 2 current MetricValueStatus",
    "MetricValueStatus": "1 value *Q, 2 averageValue *Q, 3 averageUtilization *i",
    "HorizontalPodAutoscalerCondition": _CONDITION,
}

COORDINATION: dict[str, str] = {
    "Lease": "1 metadata ObjectMeta, 2 spec LeaseSpec",
    "LeaseSpec": (
        "1 holderIdentity *s, 2 leaseDurationSeconds *i, 3 acquireTime *MT, 4 renewTime *MT,"
        " 5 leaseTransitions *i, 6 strategy *s, 7 preferredHolder *s"
    ),
}

DISCOVERY: dict[str, str] = {
    "EndpointSlice": (
        "1 metadata ObjectMeta, 2 endpoints! []Endpoint, 3 ports! []EndpointPort, 4 addressType!"
    ),
    "Endpoint": (
        "1 addresses! []s, 2 conditions EndpointConditions, 3 hostname *s, 4 targetRef *ObjectReference,"
        " 5 deprecatedTopology {}s, 6 nodeName *s, 7 zone *s, 8 hints *EndpointHints"
    ),
    "EndpointConditions": "1 ready *b, 2 serving *b, 3 terminating *b",
    "EndpointHints": "1 forZones []ForZone",
    "ForZone": "1 name!",
    "EndpointPort": "1 name *s, 2 protocol *s, 3 port *i, 4 appProtocol *s",
}

EVENTS: dict[str, str] = {
    "Event": (
        "1 metadata ObjectMeta, 2 eventTime MT, 3 series *EventSeries, 4 reportingController,"
        " 5 reportingInstance, 6 action, 7 reason, 8 regarding ObjectReference, 9 related *ObjectReference,"
        " 10 note, 11 type, 12 deprecatedSource EventSource, 13 deprecatedFirstTimestamp T,"
        " 14 deprecatedLastTimestamp T, 15 deprecatedCount i"
    ),
    "EventSeries": "1 count! i, 2 lastObservedTime MT",
}

RBAC: dict[str, str] = {
    "Role": "1 metadata ObjectMeta, 2 rules! []PolicyRule",
    "ClusterRole": "1 metadata ObjectMeta, 2 rules! []PolicyRule, 3 aggregationRule *AggregationRule",
    "RoleBinding": "1 metadata ObjectMeta, 2 subjects []Subject, 3 roleRef RoleRef",
    "ClusterRoleBinding": "1 metadata ObjectMeta, 2 subjects []Subject, 3 roleRef RoleRef",
    "PolicyRule": "1 verbs! []s, 2 apiGroups []s, 3 resources []s, 4 resourceNames []s, 5 nonResourceURLs []s",
    "AggregationRule": "1 clusterRoleSelectors []LabelSelector",
    "Subject": "1 kind!, 2 apiGroup, 3 name!, 4 namespace",
    "RoleRef": "1 apiGroup!, 2 kind!, 3 name!",
}

POLICY: dict[str, str] = {
    "PodDisruptionBudget": _OBJECT.format("PodDisruptionBudget"),
    "Eviction": "1 metadata ObjectMeta, 2 deleteOptions *DeleteOptions",
    "PodDisruptionBudgetSpec": (
        "1 minAvailable *IS, 2 selector *LabelSelector, 3 maxUnavailable *IS, 4 unhealthyPodEvictionPolicy *s"
    ),
    "PodDisruptionBudgetStatus": (
        "1 observedGeneration l, 2 disruptedPods {}T, 3 disruptionsAllowed! i, 4 currentHealthy! i,"
        " 5 desiredHealthy! i, 6 expectedPods! i, 7 conditions []Condition"
    ),
}

NETWORKING: dict[str, str] = {
    "Ingress": _OBJECT.format("Ingress"),
    "IngressClass": "1 metadata ObjectMeta, 2 spec IngressClassSpec",
    "NetworkPolicy": "1 metadata ObjectMeta, 2 spec NetworkPolicySpec",
    "IngressSpec": (
        "1 defaultBackend *IngressBackend, 2 tls []IngressTLS, 3 rules []IngressRule, 4 ingressClassName *s"
    ),
    "IngressBackend": "3 resource *TypedLocalObjectReference, 4 service *IngressServiceBackend",
    "IngressServiceBackend": "1 name!, 2 port ServiceBackendPort",
    "ServiceBackendPort": "1 name, 2 number i",
    "IngressTLS": "1 hosts []s, 2 secretName",
    "IngressRule": "1 host, 2 ~ IngressRuleValue",
    "IngressRuleValue": "1 http *HTTPIngressRuleValue",
    "HTTPIngressRuleValue": "1 paths! []HTTPIngressPath",
    "HTTPIngressPath": "1 path, 2 backend IngressBackend, 3 pathType! *s",
    "IngressStatus": "1 loadBalancer IngressLoadBalancerStatus",
    "IngressLoadBalancerStatus": "1 ingress []IngressLoadBalancerIngress",
    "IngressLoadBalancerIngress": "1 ip, 2 hostname, 4 ports []IngressPortStatus",
    "IngressPortStatus": "1 port! i, 2 protocol!, 3 error *s",
    "IngressClassSpec": "1 controller, 2 parameters *IngressClassParametersReference",
    "IngressClassParametersReference": "1 apiGroup *s, 2 kind!, 3 name!, 4 scope! *s, 5 namespace *s",
    "NetworkPolicySpec": (
        "1 podSelector LabelSelector, 2 ingress []NetworkPolicyIngressRule, 3 egress []NetworkPolicyEgressRule,"
        " 4 policyTypes []s"
    ),
    "NetworkPolicyIngressRule": "1 ports []NetworkPolicyPort, 2 from []NetworkPolicyPeer",
    "NetworkPolicyEgressRule": "1 ports []NetworkPolicyPort, 2 to []NetworkPolicyPeer",
    "NetworkPolicyPort": "1 protocol *s, 2 port *IS, 3 endPort *i",
    "NetworkPolicyPeer": (
        "1 podSelector *LabelSelector, 2 namespaceSelector *LabelSelector, 3 ipBlock *IPBlock"
    ),
    "IPBlock": "1 cidr!, 2 except []s",
}

STORAGE: dict[str, str] = {
    "StorageClass": (
        "1 metadata ObjectMeta, 2 provisioner!, 3 parameters {}s, 4 reclaimPolicy *s, 5 mountOptions []s,"
        " 6 allowVolumeExpansion *b, 7 volumeBindingMode *s, 8 allowedTopologies []TopologySelectorTerm"
    ),
    "CSIDriver": "1 metadata ObjectMeta, 2 spec! CSIDriverSpec",
    "CSIDriverSpec": (
        "1 attachRequired *b, 2 podInfoOnMount *b, 3 volumeLifecycleModes []s, 4 storageCapacity *b,"
        " 5 fsGroupPolicy *s, 6 tokenRequests []TokenRequest, 7 requiresRepublish *b, 8 seLinuxMount *b"
    ),
    "TokenRequest": "1 audience!, 2 expirationSeconds *l",
    "CSIStorageCapacity": (
        "1 metadata ObjectMeta, 2 nodeTopology *LabelSelector, 3 storageClassName!, 4 capacity *Q,"
        " 5 maximumVolumeSize *Q"
    ),
}

SCHEDULING: dict[str, str] = {
    "PriorityClass": (
        "1 metadata ObjectMeta, 2 value! i, 3 globalDefault b, 4 description, 5 preemptionPolicy *s"
    ),
}

NODE: dict[str, str] = {
    "RuntimeClass": "1 metadata ObjectMeta, 2 handler!, 3 overhead *Overhead, 4 scheduling *Scheduling",
    "Overhead": "1 podFixed {}Q",
    "Scheduling": "1 nodeSelector {}s, 2 tolerations []Toleration",
}

_WEBHOOK = (
    "1 name!, 2 clientConfig WebhookClientConfig, 3 rules []RuleWithOperations, 4 failurePolicy *s,"
    " 9 matchPolicy *s, 5 namespaceSelector *LabelSelector, {object} objectSelector *LabelSelector, 6 sideEffects *s,"
    " 7 timeoutSeconds *i, 8 admissionReviewVersions []s{extra}, {conditions} matchConditions []MatchCondition"
)

ADMISSIONREGISTRATION: dict[str, str] = {
    "MutatingWebhookConfiguration": "1 metadata ObjectMeta, 2 webhooks []MutatingWebhook",
    "ValidatingWebhookConfiguration": "1 metadata ObjectMeta, 2 webhooks []ValidatingWebhook",
    "MutatingWebhook": _WEBHOOK.format(object=11, extra=", 10 reinvocationPolicy *s", conditions=12),
    "ValidatingWebhook": _WEBHOOK.format(object=10, extra="", conditions=11),
    "RuleWithOperations": "1 operations []s, 2 ~ Rule",
    "Rule": "1 apiGroups []s, 2 apiVersions []s, 3 resources []s, 4 scope *s",
    "WebhookClientConfig": "3 url *s, 1 service *ServiceReference, 2 caBundle y",
    "ServiceReference": "1 namespace!, 2 name!, 3 path *s, 4 port *i",
    "MatchCondition": "1 name!, 2 expression!",
    "ValidatingAdmissionPolicy": _OBJECT.format("ValidatingAdmissionPolicy"),
    "ValidatingAdmissionPolicySpec": (
        "1 paramKind *ParamKind, 2 matchConstraints *MatchResources, 3 validations []Validation,"
        " 4 failurePolicy *s, 5 auditAnnotations []AuditAnnotation, 6 matchConditions []MatchCondition,"
        " 7 variables []Variable"
    ),
    "ValidatingAdmissionPolicyStatus": (
        "1 observedGeneration l, 2 typeChecking *TypeChecking, 3 conditions []Condition"
    ),
    "TypeChecking": "1 expressionWarnings []ExpressionWarning",
    "ExpressionWarning": "2 fieldRef!, 3 warning!",
    "ParamKind": "1 apiVersion, 2 kind",
    "MatchResources": (
        "1 namespaceSelector *LabelSelector, 2 objectSelector *LabelSelector,"
        " 3 resourceRules []NamedRuleWithOperations, 4 excludeResourceRules []NamedRuleWithOperations,"
        " 7 matchPolicy *s"
    ),
    "NamedRuleWithOperations": "1 resourceNames []s, 2 ~ RuleWithOperations",
    "Validation": "1 expression!, 2 message, 3 reason *s, 4 messageExpression",
    "AuditAnnotation": "1 key!, 2 valueExpression!",
    "Variable": "1 name!, 2 expression!",
    "ValidatingAdmissionPolicyBinding": "1 metadata ObjectMeta, 2 spec ValidatingAdmissionPolicyBindingSpec",
    "ValidatingAdmissionPolicyBindingSpec": (
        "1 policyName, 2 paramRef *ParamRef, 3 matchResources *MatchResources, 4 validationActions []s"
    ),
    "ParamRef": "1 name, 2 namespace, 3 selector *LabelSelector, 4 parameterNotFoundAction *s",
}

FLOWCONTROL: dict[str, str] = {
    "FlowSchema": _OBJECT.format("FlowSchema"),
    "FlowSchemaSpec": (
        "1 priorityLevelConfiguration! PriorityLevelConfigurationReference, 2 matchingPrecedence i,"
        " 3 distinguisherMethod *FlowDistinguisherMethod, 4 rules []PolicyRulesWithSubjects"
    ),
    "PriorityLevelConfigurationReference": "1 name!",
    "FlowDistinguisherMethod": "1 type!",
    "PolicyRulesWithSubjects": (
        "1 subjects! []Subject, 2 resourceRules []ResourcePolicyRule, 3 nonResourceRules []NonResourcePolicyRule"
    ),
    "Subject": "1 kind!, 2 user *UserSubject, 3 group *GroupSubject, 4 serviceAccount *ServiceAccountSubject",
    "UserSubject": "1 name!",
    "GroupSubject": "1 name!",
    "ServiceAccountSubject": "1 namespace!, 2 name!",
    "ResourcePolicyRule": "1 verbs! []s, 2 apiGroups! []s, 3 resources! []s, 4 clusterScope b, 5 namespaces []s",
    "NonResourcePolicyRule": "1 verbs! []s, 6 nonResourceURLs! []s",
    "FlowSchemaStatus": "1 conditions []FlowSchemaCondition",
    "FlowSchemaCondition": "1 type, 2 status, 3 lastTransitionTime T, 4 reason, 5 message",
    "PriorityLevelConfiguration": _OBJECT.format("PriorityLevelConfiguration"),
    "PriorityLevelConfigurationSpec": (
        "1 type!, 2 limited *LimitedPriorityLevelConfiguration, 3 exempt *ExemptPriorityLevelConfiguration"
    ),
    "LimitedPriorityLevelConfiguration": (
        "1 nominalConcurrencyShares! *i, 2 limitResponse LimitResponse, 3 lendablePercent *i,"
        " 4 borrowingLimitPercent *i"
    ),
    "LimitResponse": "1 type!, 2 queuing *QueuingConfiguration",
    "QueuingConfiguration": "1 queues i, 2 handSize i, 3 queueLengthLimit i",
    "ExemptPriorityLevelConfiguration": "1 nominalConcurrencyShares *i, 2 lendablePercent *i",
    "PriorityLevelConfigurationStatus": "1 conditions []PriorityLevelConfigurationCondition",
    "PriorityLevelConfigurationCondition": "1 type, 2 status, 3 lastTransitionTime T, 4 reason, 5 message",
}

AUTHENTICATION: dict[str, str] = {
    "TokenRequest": "1 metadata ObjectMeta, 2 spec TokenRequestSpec, 3 status TokenRequestStatus",
    "TokenRequestSpec": "1 audiences! []s, 3 boundObjectRef! *BoundObjectReference, 4 expirationSeconds! *l",
    "BoundObjectReference": "1 kind, 2 apiVersion, 3 name, 4 uid",
    "TokenRequestStatus": "1 token!, 2 expirationTimestamp T",
    "TokenReview": "1 metadata ObjectMeta, 2 spec TokenReviewSpec, 3 status TokenReviewStatus",
    "TokenReviewSpec": "1 token, 2 audiences []s",
    "TokenReviewStatus": "1 authenticated b, 2 user UserInfo, 3 error, 4 audiences []s",
    "UserInfo": "1 username, 2 uid, 3 groups []s, 4 extra {}SL",
    "SelfSubjectReview": "1 metadata ObjectMeta, 2 status SelfSubjectReviewStatus",
    "SelfSubjectReviewStatus": "1 userInfo UserInfo",
}

AUTHORIZATION: dict[str, str] = {
    "SubjectAccessReview": (
        "1 metadata ObjectMeta, 2 spec SubjectAccessReviewSpec, 3 status SubjectAccessReviewStatus"
    ),
    "LocalSubjectAccessReview": (
        "1 metadata ObjectMeta, 2 spec SubjectAccessReviewSpec, 3 status SubjectAccessReviewStatus"
    ),
    "SelfSubjectAccessReview": (
        "1 metadata ObjectMeta, 2 spec SelfSubjectAccessReviewSpec, 3 status SubjectAccessReviewStatus"
    ),
    "SelfSubjectRulesReview": (
        "1 metadata ObjectMeta, 2 spec SelfSubjectRulesReviewSpec, 3 status SubjectRulesReviewStatus"
    ),
    "SubjectAccessReviewSpec": (
        "1 resourceAttributes *ResourceAttributes, 2 nonResourceAttributes *NonResourceAttributes, 3 user,"
        " 4 groups []s, 5 extra {}SL, 6 uid"
    ),
    "SelfSubjectAccessReviewSpec": (
        "1 resourceAttributes *ResourceAttributes, 2 nonResourceAttributes *NonResourceAttributes"
    ),
    "ResourceAttributes": (
        "1 namespace, 2 verb, 3 group, 4 version, 5 resource, 6 subresource, 7 name,"
        " 8 fieldSelector *FieldSelectorAttributes, 9 labelSelector *LabelSelectorAttributes"
    ),
    "FieldSelectorAttributes": "1 rawSelector, 2 requirements []FieldSelectorRequirement",
    "LabelSelectorAttributes": "1 rawSelector, 2 requirements []LabelSelectorRequirement",
    "NonResourceAttributes": "1 path, 2 verb",
    "SubjectAccessReviewStatus": "1 allowed! b, 2 reason, 3 evaluationError, 4 denied b",
    "SelfSubjectRulesReviewSpec": "1 namespace",
    "SubjectRulesReviewStatus": (
        "1 resourceRules! []ResourceRule, 2 nonResourceRules! []NonResourceRule, 3 incomplete! b,"
        " 4 evaluationError"
    ),
    "ResourceRule": "1 verbs! []s, 2 apiGroups []s, 3 resources []s, 4 resourceNames []s",
    "NonResourceRule": "1 verbs! []s, 2 nonResourceURLs []s",
}

CERTIFICATES: dict[str, str] = {
    "CertificateSigningRequest": _OBJECT.format("CertificateSigningRequest"),
    "CertificateSigningRequestSpec": (
        "1 request y, 2 username, 3 uid, 4 groups []s, 5 usages []s, 6 extra {}SL, 7 signerName,"
        " 8 expirationSeconds *i"
    ),
    "CertificateSigningRequestStatus": "1 conditions []CertificateSigningRequestCondition, 2 certificate y",
    "CertificateSigningRequestCondition": (
        "1 type!, 2 reason, 3 message, 4 lastUpdateTime T, 5 lastTransitionTime T, 6 status!"
    ),
}

APIREGISTRATION: dict[str, str] = {
    "APIService": _OBJECT.format("APIService"),
    "APIServiceSpec": (
        "1 service *ServiceReference, 2 group, 3 version, 4 insecureSkipTLSVerify b, 5 caBundle y,"
        " 7 groupPriorityMinimum! i, 8 versionPriority! i"
    ),
    "ServiceReference": "1 namespace, 2 name, 3 port *i",
    "APIServiceStatus": "1 conditions []APIServiceCondition",
    "APIServiceCondition": _CONDITION,
}

# Package name -> (served apiVersion, its table, the OpenAPI definition prefix used to cross-check it).
PACKAGES: dict[str, tuple[str, dict[str, str], str]] = {
    "meta": ("meta.k8s.io/v1", META, "io.k8s.apimachinery.pkg.apis.meta.v1"),
    "core": ("v1", CORE, "io.k8s.api.core.v1"),
    "apps": ("apps/v1", APPS, "io.k8s.api.apps.v1"),
    "batch": ("batch/v1", BATCH, "io.k8s.api.batch.v1"),
    "autoscaling.v1": ("autoscaling/v1", AUTOSCALING_V1, "io.k8s.api.autoscaling.v1"),
    "autoscaling.v2": ("autoscaling/v2", AUTOSCALING_V2, "io.k8s.api.autoscaling.v2"),
    "coordination": ("coordination.k8s.io/v1", COORDINATION, "io.k8s.api.coordination.v1"),
    "discovery": ("discovery.k8s.io/v1", DISCOVERY, "io.k8s.api.discovery.v1"),
    "events": ("events.k8s.io/v1", EVENTS, "io.k8s.api.events.v1"),
    "rbac": ("rbac.authorization.k8s.io/v1", RBAC, "io.k8s.api.rbac.v1"),
    "policy": ("policy/v1", POLICY, "io.k8s.api.policy.v1"),
    "networking": ("networking.k8s.io/v1", NETWORKING, "io.k8s.api.networking.v1"),
    "storage": ("storage.k8s.io/v1", STORAGE, "io.k8s.api.storage.v1"),
    "scheduling": ("scheduling.k8s.io/v1", SCHEDULING, "io.k8s.api.scheduling.v1"),
    "node": ("node.k8s.io/v1", NODE, "io.k8s.api.node.v1"),
    "admissionregistration": (
        "admissionregistration.k8s.io/v1", ADMISSIONREGISTRATION, "io.k8s.api.admissionregistration.v1",
    ),
    "flowcontrol": ("flowcontrol.apiserver.k8s.io/v1", FLOWCONTROL, "io.k8s.api.flowcontrol.v1"),
    "authentication": ("authentication.k8s.io/v1", AUTHENTICATION, "io.k8s.api.authentication.v1"),
    "authorization": ("authorization.k8s.io/v1", AUTHORIZATION, "io.k8s.api.authorization.v1"),
    "certificates": ("certificates.k8s.io/v1", CERTIFICATES, "io.k8s.api.certificates.v1"),
    "apiregistration": ("apiregistration.k8s.io/v1", APIREGISTRATION,
                        "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1"),
}

# The kinds a client may send as a whole request body, per package.
KINDS: dict[str, tuple[str, ...]] = {
    "meta": ("DeleteOptions",),
    "core": (
        "Namespace", "Pod", "Binding", "Service", "Endpoints", "Node", "ConfigMap", "Secret", "ServiceAccount",
        "Event", "PersistentVolume", "PersistentVolumeClaim", "LimitRange", "ResourceQuota",
        "ReplicationController", "PodTemplate", "ComponentStatus",
    ),
    "apps": ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "ControllerRevision"),
    "batch": ("Job", "CronJob"),
    "autoscaling.v1": ("HorizontalPodAutoscaler", "Scale"),
    "autoscaling.v2": ("HorizontalPodAutoscaler",),
    "coordination": ("Lease",),
    "discovery": ("EndpointSlice",),
    "events": ("Event",),
    "rbac": ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"),
    "policy": ("PodDisruptionBudget", "Eviction"),
    "networking": ("Ingress", "IngressClass", "NetworkPolicy"),
    "storage": ("StorageClass", "CSIDriver", "CSIStorageCapacity"),
    "scheduling": ("PriorityClass",),
    "node": ("RuntimeClass",),
    "admissionregistration": (
        "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ),
    "flowcontrol": ("FlowSchema", "PriorityLevelConfiguration"),
    "authentication": ("TokenRequest", "TokenReview", "SelfSubjectReview"),
    "authorization": (
        "SubjectAccessReview", "LocalSubjectAccessReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview",
    ),
    "certificates": ("CertificateSigningRequest",),
    "apiregistration": ("APIService",),
}
