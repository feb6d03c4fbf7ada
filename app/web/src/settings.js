// The settings panel, drawn from the graph's context schema (the per-run settings only).
import { el } from "./dom.js";

function kindOf(property) {
  if (property.enum) return "enum";
  const types = property.anyOf ? property.anyOf.map((p) => p.type) : [property.type];
  if (types.includes("boolean")) return "boolean";
  if (types.includes("integer")) return "integer";
  if (types.includes("number")) return "number";
  if (types.includes("array")) return "array";
  return "string";
}

function enumOf(property) {
  if (property.enum) return property.enum;
  const inner = (property.anyOf || []).find((p) => p.enum);
  return inner ? inner.enum : [];
}

function field(name, property) {
  const id = `setting-${name}`;
  const kind = kindOf(property);
  const label = property.title || name.replace(/_/g, " ");
  const help = property.description ? el("p", { class: "hint", id: `${id}-help`, text: property.description }) : null;
  const common = { id, name, "aria-describedby": help ? `${id}-help` : null, "data-kind": kind };
  let input;
  if (kind === "boolean") {
    input = el("input", { ...common, type: "checkbox", checked: property.default === true });
    return el("div", { class: "setting check" }, el("label", { for: id }, input, ` ${label}`), help);
  }
  if (kind === "enum") {
    input = el("select", common, ...enumOf(property).map((v) =>
      el("option", { value: v, selected: v === property.default, text: String(v) })));
  } else if (kind === "integer" || kind === "number") {
    input = el("input", {
      ...common, type: "number", value: property.default ?? "",
      min: property.minimum ?? property.exclusiveMinimum, max: property.maximum ?? property.exclusiveMaximum,
      step: kind === "integer" ? 1 : "any",
    });
  } else {
    const value = Array.isArray(property.default) ? property.default.join(", ") : property.default ?? "";
    input = el("input", { ...common, type: "text", value, autocomplete: "off" });
  }
  return el("div", { class: "setting" }, el("label", { for: id, text: label }), input, help);
}

/** Draw the form for `schema` (JSON schema of the context) into `form`. */
export function drawSettings(form, schema) {
  form.replaceChildren();
  const properties = (schema && schema.properties) || {};
  for (const [name, property] of Object.entries(properties)) form.append(field(name, property));
  form.append(el("button", { type: "reset", text: "Back to the defaults" }));
  form.dataset.schema = JSON.stringify(properties);
}

function valueOf(input) {
  const kind = input.dataset.kind;
  if (kind === "boolean") return input.checked;
  if (kind === "integer") return input.value === "" ? null : parseInt(input.value, 10);
  if (kind === "number") return input.value === "" ? null : parseFloat(input.value);
  if (kind === "array") return input.value.split(",").map((s) => s.trim()).filter(Boolean);
  return input.value;
}

/** The settings that differ from the schema's defaults: a run's `context`. */
export function chosenContext(form) {
  const properties = JSON.parse(form.dataset.schema || "{}");
  const context = {};
  for (const [name, property] of Object.entries(properties)) {
    const input = form.elements.namedItem(name);
    if (!input) continue;
    const value = valueOf(input);
    if (value === null) continue;
    if (JSON.stringify(value) !== JSON.stringify(property.default ?? (Array.isArray(value) ? [] : ""))) {
      context[name] = value;
    }
  }
  return context;
}
