// Pod Security Standards, "restricted" profile
// (https://kubernetes.io/docs/concepts/security/pod-security-standards/), checked on
// every pod an object makes, plus one rule of Stoke's own: no service-account token is
// mounted, as no Stoke process talks to the Kubernetes API.
"use strict";

// Volume types the restricted profile allows.
const ALLOWED_VOLUMES = new Set([
  "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
  "projected", "secret",
]);

// The pod spec an object makes, and where it lies; null for objects that make no pod.
function podSpecOf(object) {
  const spec = object.spec || {};
  switch (object.kind) {
    case "Pod":
      return { pod: spec, where: "/spec" };
    case "Deployment":
    case "StatefulSet":
    case "DaemonSet":
    case "ReplicaSet":
    case "Job":
      return { pod: (spec.template || {}).spec || {}, where: "/spec/template/spec" };
    case "CronJob":
      return {
        pod: (((spec.jobTemplate || {}).spec || {}).template || {}).spec || {},
        where: "/spec/jobTemplate/spec/template/spec",
      };
    default:
      return null;
  }
}

// "PATH: why" for each way the object's pod breaks the restricted profile.
function restrictedProblems(object) {
  const found = podSpecOf(object);
  if (found === null) return [];
  const { pod, where } = found;
  const problems = [];
  const say = (at, why) => problems.push(`${where}${at}: ${why} (Pod Security "restricted")`);
  for (const field of ["hostNetwork", "hostPID", "hostIPC"]) {
    if (pod[field] === true) say(`/${field}`, "must not be true");
  }
  if (pod.automountServiceAccountToken !== false) {
    say("/automountServiceAccountToken", "must be false: no Stoke process uses the API");
  }
  (pod.volumes || []).forEach((volume, i) => {
    for (const type of Object.keys(volume)) {
      if (type !== "name" && !ALLOWED_VOLUMES.has(type)) say(`/volumes/${i}/${type}`, "volume type not allowed");
    }
  });
  const podContext = pod.securityContext || {};
  const podSeccomp = (podContext.seccompProfile || {}).type;
  const containers = [];
  for (const list of ["initContainers", "containers", "ephemeralContainers"]) {
    (pod[list] || []).forEach((c, i) => containers.push({ c, at: `/${list}/${i}` }));
  }
  if (podContext.runAsUser === 0) say("/securityContext/runAsUser", "must not be 0");
  for (const { c, at } of containers) {
    const context = c.securityContext || {};
    const ctx = `${at}/securityContext`;
    if (context.privileged === true) say(`${ctx}/privileged`, "must not be true");
    if (context.allowPrivilegeEscalation !== false) say(`${ctx}/allowPrivilegeEscalation`, "must be false");
    const capabilities = context.capabilities || {};
    if (!(capabilities.drop || []).includes("ALL")) say(`${ctx}/capabilities/drop`, "must include ALL");
    for (const added of capabilities.add || []) {
      if (added !== "NET_BIND_SERVICE") say(`${ctx}/capabilities/add`, `${added} is not allowed`);
    }
    const nonRoot = context.runAsNonRoot !== undefined ? context.runAsNonRoot : podContext.runAsNonRoot;
    if (nonRoot !== true) say(`${ctx}/runAsNonRoot`, "must be true, here or in the pod's securityContext");
    if (context.runAsUser === 0) say(`${ctx}/runAsUser`, "must not be 0");
    const seccomp = (context.seccompProfile || {}).type || podSeccomp;
    if (seccomp !== "RuntimeDefault" && seccomp !== "Localhost") {
      say(`${ctx}/seccompProfile/type`, "must be RuntimeDefault or Localhost, here or in the pod's securityContext");
    }
    (c.ports || []).forEach((port, p) => {
      if (port.hostPort) say(`${at}/ports/${p}/hostPort`, "must not be set");
    });
  }
  return problems;
}

module.exports = { restrictedProblems };
