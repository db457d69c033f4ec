/**
 * `mcp-store keys create|list|revoke`: key management without a server. A running store sees the
 * change at once (it watches the keys file, src/config/api-keys.ts). `create` prints the key once; the
 * file keeps only its hash. The keys file is `--keys-file`, else `MCPSTORE_KEYS_FILE`, else
 * `mcp-store.keys.json` beside the services file (`--config`, `MCPSTORE_CONFIG`, `./mcp.json`).
 */
import { resolve as resolvePath } from "node:path"
import { Command, Option } from "commander"
import { globsProblem } from "../domain/tool-filter.js"
import { agentIdProblem } from "../domain/service-definition.js"
import { parseArguments, runFileAction, servicesFileOf, UsageError } from "./subcommand.js"
import { withFileLock } from "../config/file-lock.js"
import { defaultKeysFile, KeysFileError, newKey, readKeys, readUses, ROLES, TOOL_MODES, withUses, writeKeys, type KeyEntry, type Role, type ToolMode } from "../config/api-keys.js"

/** Where `runKeys` writes and what relative paths resolve against. */
export interface KeysIo {
  readonly cwd?: string
  readonly writeOut?: (text: string) => void
  readonly writeErr?: (text: string) => void
}

/** The keys file the options name; an empty path is refused (it would name the directory, and the keys file land beside it). */
export const keysFileOf = (opts: Record<string, unknown>, env: NodeJS.ProcessEnv, cwd: string): string => {
  if (typeof opts["keysFile"] === "string" && opts["keysFile"].trim() === "") throw new UsageError("--keys-file must be the path of a file")
  const services = servicesFileOf(opts["config"], env, cwd)
  const given = typeof opts["keysFile"] === "string" ? opts["keysFile"] : env["MCPSTORE_KEYS_FILE"] || undefined
  return given !== undefined ? resolvePath(cwd, given) : defaultKeysFile(services)
}

const status = (k: KeyEntry, now: number): string =>
  k.revoked !== null ? `revoked ${k.revoked}` : k.expires !== null && Date.parse(k.expires) <= now ? "expired" : "active"

/** The table `keys list` prints: never a key, never a hash. */
export const formatKeys = (keys: ReadonlyArray<KeyEntry>, now = Date.now()): string => {
  if (keys.length === 0) return "no keys\n"
  const rows = [
    ["NAME", "ROLE", "AGENT", "TOOLS", "CREATED", "LAST USED", "EXPIRES", "STATUS"],
    ...keys.map((k) => [k.name, k.role, k.agent ?? "-", k.tools?.join(",") ?? "-", k.created, k.last_used ?? "never", k.expires ?? "never", status(k, now)])
  ]
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)))
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n") + "\n"
}

/**
 * Runs `mcp-store keys <command>` (argv after `keys`). Resolves with the exit code: 0 done, 1 the
 * file could not be read or written, 2 a usage error.
 */
export const runKeys = async (argv: ReadonlyArray<string>, env: NodeJS.ProcessEnv, io: KeysIo = {}): Promise<number> => {
  const out = io.writeOut ?? ((text: string) => void process.stdout.write(text))
  const err = io.writeErr ?? ((text: string) => void process.stderr.write(text))
  const cwd = io.cwd ?? process.cwd()
  let action: (() => Promise<void>) | undefined
  const fileOptions = (c: Command) =>
    c
      .addOption(new Option("--keys-file <file>", "the keys file (default: MCPSTORE_KEYS_FILE, or mcp-store.keys.json beside the services file)"))
      .addOption(new Option("--config <file>", "the services file, beside which the keys file is (default: MCPSTORE_CONFIG or ./mcp.json)"))
  const program = new Command("mcp-store keys")
    .description("create, list and revoke API keys (a running store picks changes up at once)")
    .exitOverride()
    .configureOutput({ writeOut: out, writeErr: err, outputError: () => undefined })
  fileOptions(
    program
      .command("create")
      .description("create a key and print it once (only its hash is stored)")
      .addOption(new Option("--role <role>", "admin, agent or reader").choices(ROLES).makeOptionMandatory())
      .addOption(new Option("--agent <id>", "the agent an agent key is bound to (required with --role agent)"))
      .addOption(new Option("--name <label>", "a unique label (default: role, agent and the key's id)"))
      .addOption(new Option("--expires <days>", "days until the key expires (default: never)"))
      .addOption(new Option("--tools <globs>", "agent keys: comma list of globs over callable names <service>__<tool> the key may see and call"))
      .addOption(new Option("--tool-mode <mode>", "how the key's MCP clients are listed tools: search (search_tools and call_tool) or full (default: the store's)").choices(TOOL_MODES))
  ).action((opts: Record<string, unknown>) => {
    action = async () => {
      const role = opts["role"] as Role
      const agent = typeof opts["agent"] === "string" ? opts["agent"] : undefined
      if (role === "agent" && agent === undefined) throw new UsageError("--role agent needs --agent <id>")
      if (role !== "agent" && agent !== undefined) throw new UsageError("--agent is only for --role agent")
      if (agent !== undefined && agentIdProblem(agent) !== undefined) throw new UsageError(`--agent ${agentIdProblem(agent)}`)
      const tools = typeof opts["tools"] === "string" ? opts["tools"].split(",").map((t) => t.trim()).filter((t) => t !== "") : undefined
      if (tools !== undefined && role !== "agent") throw new UsageError("--tools is only for --role agent")
      const toolsProblem = tools === undefined ? undefined : globsProblem(tools)
      if (toolsProblem !== undefined) throw new UsageError(`--tools ${toolsProblem}`)
      let expiresDays: number | undefined
      if (opts["expires"] !== undefined) {
        expiresDays = Number(opts["expires"])
        if (!Number.isFinite(expiresDays) || expiresDays <= 0 || expiresDays > 36_500) throw new UsageError("--expires must be a number of days above 0")
      }
      const name = typeof opts["name"] === "string" ? opts["name"] : undefined
      if (name !== undefined && (name === "" || name.length > 100 || /[\s,]/.test(name))) throw new UsageError("--name must be 1 to 100 characters, no spaces or commas")
      const path = keysFileOf(opts, env, cwd)
      const toolMode = opts["toolMode"] as ToolMode | undefined
      if (toolMode !== undefined && role === "reader") throw new UsageError("--tool-mode is for admin and agent keys (a reader key does not reach /mcp)")
      const made = newKey({ name, role, agent, tools, toolMode, expiresDays })
      // Read and written under the file's lock: another `keys` run at the same moment waits, and its change is kept.
      await withFileLock(path, async () => {
        const doc = await readKeys(path)
        if (doc.keys.some((k) => k.name === made.entry.name)) throw new UsageError(`a key named '${made.entry.name}' exists already (keys list)`)
        await writeKeys(path, { version: 1, keys: [...doc.keys, made.entry] })
      })
      err(`created key '${made.entry.name}' (${role}${agent === undefined ? "" : ` of agent ${agent}`}) in ${path}; it is shown once:\n`)
      out(`${made.key}\n`)
    }
  })
  fileOptions(program.command("list").description("list the keys: labels, roles, agents, dates (never a key)")).action((opts: Record<string, unknown>) => {
    action = async () => {
      const path = keysFileOf(opts, env, cwd)
      const doc = await readKeys(path)
      out(formatKeys(withUses(doc.keys, await readUses(path))))
    }
  })
  fileOptions(program.command("revoke").description("revoke a key by its label").argument("<label>", "the key's name")).action(
    (label: string, opts: Record<string, unknown>) => {
      action = async () => {
        const path = keysFileOf(opts, env, cwd)
        const revoked = await withFileLock(path, async () => {
          const doc = await readKeys(path)
          const found = doc.keys.find((k) => k.name === label)
          if (found === undefined) throw new UsageError(`no key named '${label}' (keys list)`)
          if (found.revoked !== null) return found.revoked
          await writeKeys(path, { version: 1, keys: doc.keys.map((k) => (k === found ? { ...k, revoked: new Date().toISOString() } : k)) })
          return undefined
        })
        out(revoked === undefined ? `revoked key '${label}'\n` : `key '${label}' was already revoked on ${revoked}\n`)
      }
    }
  )
  const parsed = await parseArguments(program, argv, err, "mcp-store keys")
  if (parsed !== undefined) return parsed
  return runFileAction(action, program, err, "mcp-store keys", (e) => e instanceof KeysFileError)
}
