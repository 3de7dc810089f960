"""What runs on a simulated node: the kubelet, the container's shell, the config it reads,
dcgm-exporter."""
