"""The two Kubernetes parts that make an HPA act on custom metrics, for the local Kubernetes.

A real cluster runs the HorizontalPodAutoscaler controller inside kube-controller-manager and the
custom metrics API in the Prometheus Adapter. The local Kubernetes (the emulator and the process
node) has neither, and neither ships from a registry we can install from, so this package runs
their logic against the same objects and the same data:

* ``metrics_adapter`` serves ``custom.metrics.k8s.io/v1beta2`` for pods from a real Prometheus,
  reading the Prometheus Adapter rules file the chart renders (seriesQuery, resources, name,
  metricsQuery with ``<<.Series>>``, ``<<.LabelMatchers>>`` and ``<<.GroupBy>>``);
* ``algorithm`` is the HPA controller's arithmetic (replica_calculator.go and the behavior
  stabilisation and rate limits of horizontal.go), pure;
* ``controller`` reads the HorizontalPodAutoscaler objects, asks the metrics API, and writes the
  target's ``/scale`` subresource and the HPA's status, as the real controller does.
"""
