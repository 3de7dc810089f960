"""The Kubernetes API machinery of kubesim (store, HTTP server, schemas, patches)."""
