/**
 * The consent page of the built-in authorization server (GET /oauth/authorize when the operator
 * has not approved the client yet): it names the client, where the browser goes back to and the
 * agent asked for, and lets the operator, with the admin key, approve it (with a tool list) or deny
 * it. The page holds nothing secret; its decision is a `fetch` POST of JSON to /oauth/consent with
 * the key in the Authorization header, which another site's page can neither send (no key, and the
 * request guard refuses its Origin) nor frame (frame-ancestors 'none'). One inline script, allowed
 * by its hash; the request's data travel as JSON in an inert script element, never as markup.
 */
import { createHash } from "node:crypto"
import type { ConsentView } from "./grants.js"

/** The page's script (plain JavaScript: it runs as written). */
const SCRIPT = `
"use strict";
const view = JSON.parse(document.getElementById("consent-data").textContent);
const KEY = "mcp-store.api-key";
const $ = (id) => document.getElementById(id);
$("client-name").textContent = view.client_name || "(no name)";
$("client-id").textContent = view.client_id;
$("redirect").textContent = view.redirect_uri;
$("agent").textContent = view.agent;
$("scope").textContent = view.scope;
$("tools").value = view.tools === null ? "" : view.tools.join(",");
// A loopback redirect URI can be served by any program on the client's machine (the client id metadata document draft asks to say so).
const host = new URL(view.redirect_uri).hostname.replace(/^\[|\]$/g, "");
if (host === "localhost" || host === "::1" || /^127\./.test(host)) $("loopback-warning").hidden = false;
const stored = sessionStorage.getItem(KEY);
if (stored) $("key").value = stored;
const say = (state, text) => { const out = $("outcome"); out.dataset.state = state; out.textContent = text; };
const decide = async (decision) => {
  const key = $("key").value.trim();
  const toolsText = $("tools").value.trim();
  const tools = toolsText === "" ? null : toolsText.split(",").map((t) => t.trim()).filter((t) => t !== "");
  say("busy", decision === "approve" ? "Approving..." : "Denying...");
  let response;
  try {
    response = await fetch("/oauth/consent", {
      method: "POST",
      headers: { "content-type": "application/json", ...(key === "" ? {} : { authorization: "Bearer " + key }) },
      body: JSON.stringify({ request_id: view.request_id, decision, tools })
    });
  } catch (e) {
    return say("error", "The store could not be reached.");
  }
  const body = await response.json().catch(() => ({}));
  if (response.status === 401 || response.status === 403) return say("error", "The admin key is missing or wrong.");
  if (!response.ok || typeof body.location !== "string") return say("error", (body.error && body.error.message) || body.error_description || "The decision was refused.");
  if (key !== "") sessionStorage.setItem(KEY, key);
  say("ok", "Done: back to the client...");
  window.location.assign(body.location);
};
$("consent-form").addEventListener("submit", (e) => { e.preventDefault(); void decide("approve"); });
$("deny").addEventListener("click", () => void decide("deny"));
`

const HASH = `'sha256-${createHash("sha256").update(SCRIPT).digest("base64")}'`

/** The page's Content-Security-Policy: its one script by hash, requests to the store only, no framing. */
export const CONSENT_PAGE_POLICY = [
  "default-src 'none'",
  `script-src ${HASH}`,
  "style-src 'unsafe-inline'",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'"
].join("; ")

/** JSON safe inside a script element: no `<` (so no `</script>`), no line separators. */
const inertJson = (value: unknown): string => JSON.stringify(value).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029")

/** The consent page for one waiting request. */
export const consentPage = (view: ConsentView): string => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>mcp-store: approve an MCP client</title>
<style>
body { font: 15px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
dt { font-weight: 600; margin-top: .6rem; } dd { margin: 0; word-break: break-all; font-family: ui-monospace, monospace; }
label { display: block; margin-top: 1rem; font-weight: 600; } input { width: 100%; padding: .4rem; box-sizing: border-box; font: inherit; }
.buttons { margin-top: 1.2rem; display: flex; gap: .8rem; } button { padding: .5rem 1.2rem; font: inherit; }
#outcome[data-state="error"] { color: #b00020; } #outcome[data-state="ok"] { color: #0a6b2b; }
</style></head>
<body>
<h1>Approve an MCP client</h1>
<p>An MCP client asks for an access token to this store's MCP endpoint of an agent. Approve it only if you started it.</p>
<dl>
<dt>Client</dt><dd id="client-name" data-testid="client-name"></dd>
<dt>Client id (its metadata document)</dt><dd id="client-id" data-testid="client-id"></dd>
<dt>Goes back to</dt><dd id="redirect" data-testid="redirect"></dd>
<dd id="loopback-warning" data-testid="loopback-warning" hidden style="font-family: inherit; color: #8a5300">This address is on the client's own machine: any program running there could receive the authorization. Approve only a client you started yourself.</dd>
<dt>Agent</dt><dd id="agent" data-testid="agent"></dd>
<dt>Scope</dt><dd id="scope"></dd>
</dl>
<form id="consent-form">
<label for="tools">Tools it may see and call (comma list of globs over &lt;service&gt;__&lt;tool&gt;; empty: all of the agent's)</label>
<input id="tools" name="tools" autocomplete="off" data-testid="tools">
<label for="key">Admin API key</label>
<input id="key" name="key" type="password" autocomplete="off" data-testid="key">
<div class="buttons"><button type="submit" data-testid="approve">Approve</button><button type="button" id="deny" data-testid="deny">Deny</button></div>
</form>
<p id="outcome" data-testid="outcome" role="status"></p>
<script type="application/json" id="consent-data">${inertJson(view)}</script>
<script>${SCRIPT}</script>
</body></html>
`

/** A plain page (an error before anything may be sent to the client): text only, no script. */
export const plainPage = (text: string): string =>
  `<!doctype html><meta charset="utf-8"><title>mcp-store authorization</title><p>${text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)}</p>\n`
