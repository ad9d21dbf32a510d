FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=refundagent.config.settings
WORKDIR /app

COPY requirements.txt .
RUN pip install -r requirements.txt

COPY . .
# Static files are built into the image; the placeholder key exists only for this step, and the
# placeholder DATABASE_URL (never connected to) keeps the settings from starting the embedded
# PostgreSQL in the image. At run time docker-compose.yml names the real server.
RUN DJANGO_SECRET_KEY=build-only DJANGO_DEBUG=0 DATABASE_URL=postgres://build-only@localhost/none \
    python manage.py collectstatic --noinput

RUN useradd --create-home app
USER app
EXPOSE 8000
CMD ["gunicorn", "refundagent.config.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
