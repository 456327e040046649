import os

from celery import Celery

from kheish import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kheish.settings")

broker.register()  # CELERY_BROKER_URL=database:// (the default): the queue table in the service's PostgreSQL
app = Celery("kheish")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
