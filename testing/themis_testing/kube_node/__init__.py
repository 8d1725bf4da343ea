"""A local Kubernetes node for tests: StatefulSets and pods over the API emulator become real processes.

Modules (pure decisions apart from I/O):

* ``statefulset`` — which pods and PVCs a StatefulSet wants, in order (pure);
* ``env`` — a container's environment from its spec: fieldRef, secretKeyRef, configMapKeyRef,
  envFrom, ``$(VAR)`` expansion (pure);
* ``paths`` — container paths → host paths (the pod's filesystem model, pure);
* ``volumes`` — ConfigMap/Secret volumes rendered to files, kept in step with the API;
* ``image`` — what "the image" is: Dockerfile.shard's final stage read (ENTRYPOINT, CMD, ENV,
  WORKDIR, which packages it installs), the project venv standing in for its file system;
* ``backoff`` — restart back-off (pure);
* ``addresses`` — one loopback address per pod and per Service, /etc/hosts entries;
* ``kubelet`` — one supervised process per pod: probes, restarts, status;
* ``service_proxy`` — a TCP proxy per Service port to its ready pods;
* ``node`` — the composition: polls the API and drives the parts above;
* ``stack`` — emulator + node + operator as background processes (``make kube-up``/``kube-down``).

The node's model of a pod is documented in ``paths`` (file system) and ``addresses`` (network).
"""
