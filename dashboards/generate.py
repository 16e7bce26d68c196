#!/usr/bin/env python3
"""Writes Stoke's Grafana dashboards (cluster-overview.json, job.json, gpu.json) from the
panel lists below, so that all three share one layout and datasource variable. Run it after
editing a panel: `python3 dashboards/generate.py`. Every expression here is evaluated
against a real Prometheus by tests/integration/prometheus_test.cc."""
import json
import os
import re

DS = {"type": "prometheus", "uid": "${datasource}"}


def datasource_var():
    return {"name": "datasource", "label": "Prometheus", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1}


def query_var(name, label, query):
    if name != "cluster":
        query = in_cluster(query)
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": "StandardVariableQuery"},
            "definition": query, "refresh": 2, "includeAll": True, "multi": True,
            "allValue": ".+", "current": {}, "hide": 0, "sort": 1}


def cluster_var():
    # Series carry a `cluster` label where Prometheus adds one (a scrape job's labels, or a
    # federation's external labels); "All" also matches series without it.
    var = query_var("cluster", "Cluster", "label_values(stoke_build_info, cluster)")
    var["allValue"] = ".*"
    return var


# A Stoke or process metric's name, with its selector if it has one (but not a function).
METRIC = re.compile(r'\b((?:stoke|process)_[a-z_]+)(\{[^}]*\})?(?!\w|\()')


def in_cluster(expr):
    """`expr` with every metric selector limited to the dashboard's $cluster."""
    def add(match):
        name, selector = match.group(1), match.group(2)
        inner = selector[1:-1] + ", " if selector else ""
        return f'{name}{{{inner}cluster=~"$cluster"}}'
    return METRIC.sub(add, expr)


def panel(pid, kind, title, exprs, x, y, w=12, h=8, unit="short", legend=None):
    targets = []
    for i, expr in enumerate(exprs if isinstance(exprs, list) else [exprs]):
        target = {"refId": chr(ord("A") + i), "expr": in_cluster(expr), "datasource": DS}
        if legend:
            target["legendFormat"] = legend[i] if isinstance(legend, list) else legend
        targets.append(target)
    p = {"id": pid, "type": kind, "title": title, "datasource": DS,
         "gridPos": {"x": x, "y": y, "w": w, "h": h},
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}, "targets": targets}
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}}
    else:
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom"}}
    return p


def xy_panel(pid, title, x_expr, y_expr, x, y, w=12, h=8):
    """An XY chart of `y_expr` against `x_expr`, sampled together (joined on time)."""
    p = panel(pid, "xychart", title, [x_expr, y_expr], x, y, w, h, legend=["step", "loss"])
    p["transformations"] = [{"id": "joinByField", "options": {"byField": "Time", "mode": "inner"}}]
    p["options"] = {"dims": {"x": "step"}, "series": [], "seriesMapping": "auto",
                    "legend": {"displayMode": "list", "placement": "bottom"}}
    return p


def dashboard(title, uid, variables, panels):
    return {"title": title, "uid": uid, "tags": ["stoke"], "timezone": "browser",
            "schemaVersion": 38, "version": 2, "refresh": "5s",
            "time": {"from": "now-1h", "to": "now"},
            "templating": {"list": [datasource_var(), cluster_var()] + variables},
            "panels": panels}


CLUSTER = dashboard("Stoke — cluster overview", "stoke-cluster", [], [
    panel(1, "stat", "Devices busy", 'sum(stoke_workers{state="busy"})', 0, 0, 6, 4),
    panel(2, "stat", "Devices idle", 'sum(stoke_workers{state="idle"})', 6, 0, 6, 4),
    panel(3, "stat", "Jobs running", 'sum(stoke_jobs{state="running"})', 12, 0, 6, 4),
    panel(4, "stat", "Queue length", "stoke_queue_length", 18, 0, 6, 4),
    panel(5, "timeseries", "Jobs by state", "sum by (state) (stoke_jobs)", 0, 4,
          legend="{{state}}"),
    panel(6, "timeseries", "Workers by state", "sum by (state) (stoke_workers)", 12, 4,
          legend="{{state}}"),
    panel(7, "timeseries", "Device utilization", "stoke_device_utilization_ratio", 0, 12,
          unit="percentunit", legend="{{host}} {{gpu}}"),
    panel(8, "timeseries", "Device memory used", "stoke_device_memory_used_bytes", 12, 12,
          unit="bytes", legend="{{host}} {{gpu}}"),
    panel(9, "timeseries", "Throughput by job (samples/s)", "stoke_job_samples_per_second",
          0, 20, legend="job {{job_id}}"),
    panel(10, "timeseries", "Training loss by job", "stoke_job_loss", 12, 20,
          legend="job {{job_id}}"),
    panel(11, "timeseries", "Progress by job", "stoke_job_progress_ratio", 0, 28,
          unit="percentunit", legend="job {{job_id}}"),
    panel(12, "timeseries", "API latency p99 by method",
          "histogram_quantile(0.99, sum by (le, grpc_method) "
          "(rate(stoke_rpc_duration_seconds_bucket[1m])))", 12, 28, unit="s",
          legend="{{grpc_method}}"),
    panel(13, "timeseries", "Jobs finished by state (per hour)",
          "sum by (state) (increase(stoke_jobs_finished_total[1h]))", 0, 36,
          legend="{{state}}"),
    # Only the targets that are Stoke coordinators: those exporting stoke_build_info.
    panel(14, "timeseries", "Coordinator resident memory",
          "process_resident_memory_bytes and on (instance) stoke_build_info", 12, 36, 6,
          unit="bytes", legend="{{instance}}"),
    panel(15, "timeseries", "Coordinator CPU (cores)",
          "rate(process_cpu_seconds_total[1m]) and on (instance) stoke_build_info", 18, 36, 6,
          legend="{{instance}}"),
    # Sharing: quota groups' use against their guarantees, and preemptions.
    panel(16, "timeseries", "Quota use against guarantee",
          ["stoke_quota_used_devices", "stoke_quota_guaranteed_devices"], 0, 44,
          legend=["{{group}} {{type}} used", "{{group}} {{type}} guaranteed"]),
    panel(17, "timeseries", "Preemptions (per hour) and device seconds lost",
          ["increase(stoke_preemptions_total[1h])",
           "increase(stoke_preemption_lost_seconds_total[1h])"], 12, 44,
          legend=["preemptions", "device seconds lost"]),
    panel(18, "timeseries", "Owners' recent use (fair share, device hours)",
          "stoke_owner_recent_device_seconds / 3600", 0, 52, legend="{{owner}}"),
])

J = 'job_id=~"$job"'
JOB = dashboard("Stoke — job", "stoke-job",
                [query_var("job", "Job", "label_values(stoke_job_progress_ratio, job_id)")], [
    panel(1, "stat", "Progress", f"stoke_job_progress_ratio{{{J}}}", 0, 0, 6, 4,
          unit="percentunit"),
    panel(2, "stat", "Samples/s", f"stoke_job_samples_per_second{{{J}}}", 6, 0, 6, 4),
    panel(3, "stat", "MFU", f"stoke_job_mfu_ratio{{{J}}}", 12, 0, 6, 4, unit="percentunit"),
    panel(4, "stat", "Devices", f"stoke_job_devices{{{J}}}", 18, 0, 6, 4),
    panel(5, "timeseries", "Throughput", [f"stoke_job_samples_per_second{{{J}}}",
                                          f"stoke_job_tokens_per_second{{{J}}}"], 0, 4,
          legend=["samples/s {{job_id}}", "tokens/s {{job_id}}"]),
    panel(6, "timeseries", "Loss", [f"stoke_job_loss{{{J}}}", f"stoke_job_eval_loss{{{J}}}"],
          12, 4, legend=["train {{job_id}}", "eval {{job_id}}"]),
    panel(7, "timeseries", "Step time split",
          [f"stoke_job_compute_ratio{{{J}}}", f"stoke_job_data_wait_ratio{{{J}}}",
           f"stoke_job_comm_wait_ratio{{{J}}}"], 0, 12, unit="percentunit",
          legend=["compute {{job_id}}", "waiting for data {{job_id}}",
                  "waiting for all-reduce {{job_id}}"]),
    panel(8, "timeseries", "Step time", f"stoke_job_step_seconds{{{J}}}", 12, 12, unit="s",
          legend="{{job_id}}"),
    panel(9, "timeseries", "Model FLOP/s and MFU",
          [f"stoke_job_model_flops_per_second{{{J}}}", f"stoke_job_mfu_ratio{{{J}}}"], 0, 20,
          legend=["FLOP/s {{job_id}}", "MFU {{job_id}}"]),
    panel(10, "timeseries", "Tensor memory (rank 0)",
          [f"stoke_job_memory_allocated_bytes{{{J}}}", f"stoke_job_memory_reserved_bytes{{{J}}}",
           f"stoke_job_memory_peak_bytes{{{J}}}"], 12, 20, unit="bytes",
          legend=["allocated {{job_id}}", "reserved {{job_id}}", "peak {{job_id}}"]),
    panel(11, "timeseries", "Learning rate", f"stoke_job_learning_rate{{{J}}}", 0, 28,
          legend="{{job_id}}"),
    panel(12, "timeseries", "Diagnoses", f"stoke_job_diagnosis{{{J}}}", 12, 28,
          legend="{{job_id}} {{diagnosis}}"),
    panel(13, "timeseries", "Its devices' utilization",
          f"stoke_device_utilization_ratio * on (host, gpu) group_left (job_id) "
          f"stoke_job_device_info{{{J}}}", 0, 36, unit="percentunit",
          legend="{{job_id}} {{host}} {{gpu}}"),
    panel(14, "timeseries", "Its devices' memory",
          f"stoke_device_memory_used_bytes * on (host, gpu) group_left (job_id) "
          f"stoke_job_device_info{{{J}}}", 12, 36, unit="bytes",
          legend="{{job_id}} {{host}} {{gpu}}"),
    xy_panel(16, "Loss against step", f"stoke_job_step{{{J}}}", f"stoke_job_loss{{{J}}}",
             12, 44),
    # A series exists only while a rank straggles: an empty panel is a healthy job.
    panel(15, "timeseries", "Straggling ranks", f"stoke_job_straggler{{{J}}}", 0, 44,
          legend="{{job_id}} rank {{rank}} on {{host}} {{device}}: {{cause}}"),
])

G = 'host=~"$host", gpu=~"$gpu"'
GPU = dashboard("Stoke — devices", "stoke-gpu",
                [query_var("host", "Host", "label_values(stoke_device_utilization_ratio, host)"),
                 query_var("gpu", "Device", 'label_values(stoke_device_utilization_ratio{host=~"$host"}, gpu)')], [
    panel(1, "timeseries", "Utilization", f"stoke_device_utilization_ratio{{{G}}}", 0, 0,
          unit="percentunit", legend="{{host}} {{gpu}}"),
    panel(2, "timeseries", "Memory used", f"stoke_device_memory_used_bytes{{{G}}}", 12, 0,
          unit="bytes", legend="{{host}} {{gpu}}"),
    panel(3, "timeseries", "Memory used share",
          f"stoke_device_memory_used_bytes{{{G}}} / stoke_device_memory_total_bytes{{{G}}}",
          0, 8, unit="percentunit", legend="{{host}} {{gpu}}"),
    panel(4, "timeseries", "SM clock", f"stoke_device_sm_clock_hertz{{{G}}}", 12, 8,
          unit="hertz", legend="{{host}} {{gpu}}"),
    panel(5, "timeseries", "Power", f"stoke_device_power_watts{{{G}}}", 0, 16, unit="watt",
          legend="{{host}} {{gpu}}"),
    panel(6, "timeseries", "Temperature", f"stoke_device_temperature_celsius{{{G}}}", 12, 16,
          unit="celsius", legend="{{host}} {{gpu}}"),
])

HERE = os.path.dirname(os.path.abspath(__file__))
for name, board in [("cluster-overview", CLUSTER), ("job", JOB), ("gpu", GPU)]:
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(board, f, indent=2, ensure_ascii=False)
        f.write("\n")
