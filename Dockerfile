FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY . .
RUN pip install --no-cache-dir . \
    && useradd --system --create-home --uid 10001 berth

# Run from the home directory so the installed package, not the source tree
# in /src, is what gets imported.
USER berth
WORKDIR /home/berth

ENTRYPOINT ["berth"]
