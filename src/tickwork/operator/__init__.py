"""The Kubernetes operator: ``ScheduledJob`` objects in, job definitions and status out.

A sub-package on top of the engine, beside the HTTP API (neither imports the other):

- ``crd``: the ``ScheduledJob`` CustomResourceDefinition, generated from the JobSpec
  model (``make crds`` writes ``crds/scheduledjob.yaml``);
- ``handlers``: the Kopf handlers, each a thin call into the engine's reconcile core;
- ``conditions`` and ``status``: what the operator writes into ``status``;
- ``admission``: the validating webhook and its ``ValidatingWebhookConfiguration``;
- ``events``: the Events the contract lists, rate-limited;
- ``refresh``: the batched pass that keeps run-derived status current;
- ``runtime``: the embeddable operator (``Operator.run(stop)``): admission on every
  replica, the writing parts on the leader; its health port is ``coordination.health``;
- ``leadership``: the leader election as ``tickwork operator`` sets it up, its metrics;
- ``instances``: Kopf instances side by side in one event loop;
- ``lifecycle``: what the Helm chart's hook Jobs run (the Secrets drawn at install, the
  finalizers released at uninstall).

Importing this package imports no Kubernetes library; its modules do.
"""
