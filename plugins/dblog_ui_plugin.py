"""The DBLog page in the Airflow UI: "is my sync healthy?" (capture, dumps, warehouse tables).

The FastAPI app (`dblog_airflow.ui.app`) is mounted in the api-server at /dblog; the external
view puts it in the navigation and renders it inside the UI (an iframe at /plugin/dblog).
"""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

PREFIX = "/dblog"  # = dblog_airflow.ui.app.PREFIX, kept literal so this module imports nothing of the app


class DBLogUIPlugin(AirflowPlugin):
    name = "dblog_ui"
    external_views = [{
        "name": "DBLog",
        "href": f"{PREFIX}/",
        "url_route": "dblog",
        "destination": "nav",
        "nav_top_level": True,
        "icon": f"{PREFIX}/icon.svg",
    }]

    @property  # a lazy property where AirflowPlugin declares a list: read only by the api-server
    def fastapi_apps(self) -> list[dict]:  # type: ignore[override]
        # Every Airflow process imports the plugins (task processes for their macros); only the
        # api-server reads this, so only it imports FastAPI, Airflow's API security and the app.
        from dblog_airflow.ui.app import app
        return [{"app": app, "url_prefix": PREFIX, "name": "DBLog"}]
