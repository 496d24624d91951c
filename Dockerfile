# One image for every SPEX service: `spex worker <service>` picks the role. The folders
# install as the one package `spex` (pyproject.toml maps them).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY search ./search
COPY shared ./shared
COPY services ./services
COPY bench ./bench
COPY cli ./cli
COPY data ./data
RUN pip install --no-cache-dir .
ENTRYPOINT ["spex"]
