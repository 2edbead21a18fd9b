"""The MutatingAdmissionWebhook and ValidatingAdmissionWebhook admission plugins and what they are built
from: the configuration source, matching, the service resolver, the AdmissionReview client."""
