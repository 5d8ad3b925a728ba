FROM python:3.11-slim AS build

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/berth/bin:$PATH

# mypyc compiles the decision core to C, and the ranking kernel is C
# (berth/compile.py): the build stage has the C compiler, the image keeps
# only what it built
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

RUN python -m venv /opt/berth
WORKDIR /src
COPY . .
# mypyc type-checks the modules it compiles against their dependencies, so
# those come first; the package is then installed again with its compiled
# modules (package data), and mypy, needed only to build, goes
RUN pip install --no-cache-dir . 'mypy>=1.10' 'setuptools>=65' \
    && python -m berth.compile build \
    && pip install --no-cache-dir --no-deps --force-reinstall . \
    && pip uninstall -y mypy \
    && cd / && python -m berth.compile check

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/berth/bin:$PATH

COPY --from=build /opt/berth /opt/berth
RUN useradd --system --create-home --uid 10001 berth

USER berth
WORKDIR /home/berth

ENTRYPOINT ["berth"]
