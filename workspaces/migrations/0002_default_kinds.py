"""The two kinds every installation starts with; admins change or disable them."""

from django.db import migrations

DEFAULTS = [
    {
        "slug": "jupyterlab",
        "name": "JupyterLab",
        "app": "jupyter",
        # Jupyter Docker Stacks' PyTorch image with CUDA 12.
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-python-3.12",
        "port": 8888,
        "health_path": "api/status",
        "default_shape": "mig:1g.10gb",
        "allowed_shapes": ["mig:1g.10gb", "mig:2g.20gb", "mig:3g.40gb", "gpu:1", "fraction:0.5"],
        "description": "JupyterLab with PyTorch and CUDA 12.",
    },
    {
        "slug": "code-server",
        "name": "VS Code (code-server)",
        "app": "code-server",
        "image": "docker.io/codercom/code-server:4.139.1",
        "port": 8080,
        "health_path": "healthz",
        "default_shape": "gpu:1",
        "allowed_shapes": ["gpu:1", "mig:1g.10gb", "mig:3g.40gb"],
        "description": "VS Code in the browser; bring your own CUDA toolkit in the image.",
    },
]


def create(apps, schema_editor):
    kind = apps.get_model("workspaces", "WorkspaceKind")
    for values in DEFAULTS:
        kind.objects.get_or_create(slug=values["slug"], defaults=values)


class Migration(migrations.Migration):
    dependencies = [("workspaces", "0001_workspaces_and_kinds")]

    operations = [migrations.RunPython(create, migrations.RunPython.noop)]
