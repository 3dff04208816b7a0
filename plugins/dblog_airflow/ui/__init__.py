"""The DBLog page of the Airflow UI: a FastAPI app (`app.py`) serving one HTML page (`page.html`)
and the JSON it refreshes from. `plugins/dblog_ui_plugin.py` mounts it in the api-server and adds
it to the navigation. Importing this package does nothing; `app` is imported by the api-server."""
