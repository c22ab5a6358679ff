"""imagebuild: a Jupyter server extension that refuses to serve without a token.

Enabled by /etc/jupyter/jupyter_server_config.d/imagebuild.json. It runs after the command line and every config file
are applied, so an empty token from any source stops the server instead of serving without authentication.
"""


def _jupyter_server_extension_points():
    return [{"module": "imagebuild_jupyter_guard"}]


def _load_jupyter_server_extension(serverapp):
    provider = getattr(serverapp, "identity_provider", None)
    token = getattr(provider, "token", None) or ""
    if not token.strip():
        serverapp.log.critical(
            "imagebuild: refusing to start without a token; set JUPYTER_TOKEN or leave it unset for a generated one"
        )
        raise SystemExit(2)  # not an Exception: jupyter_server cannot swallow it as an extension failure
