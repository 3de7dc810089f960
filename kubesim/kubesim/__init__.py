"""kubesim: a local simulated GPU Kubernetes cluster speaking the real Kubernetes API."""
