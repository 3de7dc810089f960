"""What kube-apiserver does to an object before it is stored (defaults, admission plugins, Pod
Security), and the APIs it serves beside stored objects."""
