#!/usr/bin/env node
// Validates Kubernetes manifests against the Kubernetes API's schemas, offline (no
// cluster): each YAML document is checked as the object its apiVersion and kind name,
// with the models of the kubernetes-models package (types, required fields, formats).
// It is strict where the API server is lenient:
// - a field the API does not know is an error (the server drops it silently, so a typo
//   such as `runAsNonroot` would turn a setting off), by the field lists of
//   @kubernetes/client-node's models;
// - every pod must pass Pod Security "restricted" (pod_security.js), and mount no
//   service-account token.
// kustomization.yaml is no API object: it is checked to list files that exist.
//   node validate.js FILE_OR_FOLDER...   (folders: every .yaml/.yml file in them)
// Prints one line per document; exits 1 if any document is invalid, 2 on bad usage.
"use strict";
const fs = require("fs");
const path = require("path");
const YAML = require("yaml");
const { restrictedProblems } = require("./pod_security.js");

// "apps/v1" + "Deployment" -> kubernetes-models/apps/v1/Deployment; core "v1" -> v1/...
function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") {
    throw new Error("apiVersion and kind must be strings");
  }
  if (!/^[a-z0-9.]+(\/[a-z0-9]+)?$/.test(apiVersion) || !/^[A-Za-z]+$/.test(kind)) {
    throw new Error(`not an API type: ${apiVersion} ${kind}`);
  }
  let module;
  try {
    module = require(`kubernetes-models/${apiVersion}/${kind}`);
  } catch (error) {
    throw new Error(`unknown apiVersion/kind ${apiVersion} ${kind}`);
  }
  if (typeof module[kind] !== "function") {
    throw new Error(`unknown apiVersion/kind ${apiVersion} ${kind}`);
  }
  return module[kind];
}

function manifestFiles(args) {
  const files = [];
  for (const arg of args) {
    if (fs.statSync(arg).isDirectory()) {
      for (const name of fs.readdirSync(arg).sort()) {
        if (/\.ya?ml$/.test(name)) files.push(path.join(arg, name));
      }
    } else {
      files.push(arg);
    }
  }
  return files;
}

// The client-node class of an API object: "apps/v1" + "Deployment" -> V1Deployment.
function clientModelName(apiVersion, kind) {
  const version = apiVersion.split("/").pop();
  return version[0].toUpperCase() + version.slice(1) + kind;
}

// Adds "PATH: unknown field" for each key of `value` that its client-node type `type`
// does not list, at every depth.
function unknownFields(value, type, where, models, out) {
  if (value === null || value === undefined) return;
  let match;
  if ((match = /^Array<(.+)>$/.exec(type))) {
    if (Array.isArray(value)) value.forEach((v, i) => unknownFields(v, match[1], `${where}/${i}`, models, out));
    return;
  }
  if ((match = /^\{ \[key: string\]: (.+); \}$/.exec(type))) {
    if (typeof value === "object") {
      for (const [k, v] of Object.entries(value)) unknownFields(v, match[1], `${where}/${k}`, models, out);
    }
    return;
  }
  const model = models[type];
  // Primitives and free-form types; a wrong type is kubernetes-models' to report.
  if (!model || !Array.isArray(model.attributeTypeMap)) return;
  if (typeof value !== "object" || Array.isArray(value)) return;
  const known = new Map(model.attributeTypeMap.map((a) => [a.baseName, a.type]));
  for (const [key, child] of Object.entries(value)) {
    if (!known.has(key)) {
      out.push(`${where}/${key}: unknown field`);
    } else {
      unknownFields(child, known.get(key), `${where}/${key}`, models, out);
    }
  }
}

// A kustomization: every resource it lists must exist beside it.
function kustomizationProblems(object, file) {
  const problems = [];
  for (const resource of object.resources || []) {
    if (!fs.existsSync(path.join(path.dirname(file), resource))) {
      problems.push(`resources: ${resource} does not exist`);
    }
  }
  return problems;
}

// Returns the problems of one file's documents, as "file:line: message" strings.
function validateFile(file, report, models) {
  const text = fs.readFileSync(file, "utf8");
  const lineCounter = new YAML.LineCounter();
  const problems = [];
  const documents = YAML.parseAllDocuments(text, { lineCounter });
  for (const document of documents) {
    const line = lineCounter.linePos(document.range[0]).line;
    const where = `${file}:${line}`;
    if (document.errors.length > 0) {
      problems.push(`${where}: YAML: ${document.errors[0].message}`);
      continue;
    }
    const object = document.toJS();
    if (object === null || object === undefined) continue;  // an empty document
    const label = `${object.kind} ${object.metadata && object.metadata.name}`;
    try {
      if (object.kind === "Kustomization") {
        const wrong = kustomizationProblems(object, file);
        if (wrong.length > 0) throw new Error(wrong.join("; "));
        report(`ok   ${where} Kustomization`);
        continue;
      }
      if (!object.metadata || typeof object.metadata.name !== "string") {
        throw new Error("metadata.name is required");
      }
      const Model = modelFor(object.apiVersion, object.kind);
      new Model(object).validate();
      const strict = [];
      unknownFields(object, clientModelName(object.apiVersion, object.kind), "", models, strict);
      for (const problem of restrictedProblems(object)) strict.push(problem);
      if (strict.length > 0) throw new Error(strict.join("; "));
      report(`ok   ${where} ${label}`);
    } catch (error) {
      problems.push(`${where} ${label}: ${error.message}`);
    }
  }
  if (documents.length === 0) problems.push(`${file}: no YAML documents`);
  return problems;
}

async function main(args) {
  if (args.length === 0) {
    console.error("usage: validate.js FILE_OR_FOLDER...");
    return 2;
  }
  let files;
  try {
    files = manifestFiles(args);
  } catch (error) {
    console.error(error.message);
    return 2;
  }
  if (files.length === 0) {
    console.error(`no .yaml files in ${args.join(" ")}`);
    return 2;
  }
  // client-node is an ES module; its models carry each type's field list.
  const models = await import("@kubernetes/client-node");
  let problems = [];
  for (const file of files) {
    problems = problems.concat(validateFile(file, (line) => console.log(line), models));
  }
  for (const problem of problems) console.log(`FAIL ${problem}`);
  return problems.length === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
