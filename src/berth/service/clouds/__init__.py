"""The service side of the clouds Berth drives (docs/openstack.md, "How Berth drives a cluster"):
`registry` (kind + config -> driver, the drivers of the joined clusters), `join` (import a
cluster's inventory, leave), `claiming` (claims on one chosen host), `booting` (boot intents,
boots, alternates), `sync` (one change-feed loop per cluster), `reconcile` (repair drift, recover
boot intents after a restart) and `defrag_exec` (defrag steps as live migrations)."""
