-- Neovim (>= 0.10) as a second real LSP client of kerntune, headless:
--   nvim --headless --clean -l tests/nvim/flow.lua OUT.json FILE.cu KERNEL SERVER_CMD...
-- Opens FILE.cu, starts the server with vim.lsp.start (Neovim's own client: its didOpen/didChange, its code lens
-- module, its progress handling, its workspace/applyEdit), then: lenses, hover, Optimize over a replayed
-- recording with progress, cancel from the progress token, Optimize to the end, Apply best (Neovim applies the
-- edit to the buffer and sends the change), the lens after it. What it saw goes to OUT.json; tests/
-- test_lsp_server.py checks it. A step that times out ends the script with an error (exit status 1).
local out_path, file, kernel = arg[1], arg[2], arg[3]
local cmd = {}
for i = 4, #arg do
  table.insert(cmd, arg[i])
end

local obs = { steps = {} }
local function step(name)
  table.insert(obs.steps, name)
end
local function save()
  local f = assert(io.open(out_path, "w"))
  f:write(vim.json.encode(obs))
  f:close()
end
local function wait(ms, cond, what)
  if not vim.wait(ms, cond, 20) then
    save()
    error("timed out waiting for " .. what)
  end
end

vim.cmd.edit(vim.fn.fnameescape(file))
local buf = vim.api.nvim_get_current_buf()
local uri = vim.uri_from_bufnr(buf)

local progress, messages = {}, {}
vim.api.nvim_create_autocmd("LspProgress", {
  callback = function(ev)
    local p = ev.data.params
    local v = p.value
    table.insert(progress, { token = p.token, kind = v.kind, title = v.title, message = v.message,
                             percentage = v.percentage, cancellable = v.cancellable })
  end,
})

local id = vim.lsp.start({
  name = "kerntune",
  cmd = cmd,
  root_dir = vim.fs.dirname(file),
  handlers = {
    ["window/showMessage"] = function(_, result)
      table.insert(messages, result.message)
    end,
  },
}, { bufnr = buf })
assert(id, "vim.lsp.start failed")
local client = vim.lsp.get_client_by_id(id)
wait(30000, function()
  return client.initialized
end, "the server to initialize")
step("initialized")
obs.server_name = client.server_info and client.server_info.name

local function diags()
  return vim.diagnostic.get(buf, { namespace = vim.lsp.diagnostic.get_namespace(id) })
end
wait(20000, function()
  return #diags() > 0
end, "diagnostics")

local function lens_titles()
  local got = client:request_sync("textDocument/codeLens", { textDocument = { uri = uri } }, 10000, buf)
  local titles = {}
  for _, l in ipairs((got and got.result) or {}) do
    table.insert(titles, l.command.title)
  end
  return titles
end
local function codelens_module_titles()
  -- Neovim's own code lens module (what a user sees as virtual text), once it shows what the server answers now
  local want = table.concat(lens_titles(), "|")
  vim.lsp.codelens.refresh({ bufnr = buf })
  local titles = {}
  vim.wait(10000, function()
    titles = {}
    for _, l in ipairs(vim.lsp.codelens.get(buf)) do
      table.insert(titles, l.command and l.command.title or "?")
    end
    return table.concat(titles, "|") == want
  end, 20)
  return titles
end

obs.lenses_open = codelens_module_titles()
obs.tunable_severities = {}
for _, d in ipairs(diags()) do
  if d.code == "tunable" then
    table.insert(obs.tunable_severities, d.severity)
  end
end
step("lenses")

local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
local row
for i, l in ipairs(lines) do
  if l:find("void " .. kernel .. "(", 1, true) then
    row = i - 1
    break
  end
end
local col = lines[row + 1]:find(kernel, 1, true) + 1
local function hover_at(r, c)
  local got = client:request_sync("textDocument/hover", { textDocument = { uri = uri },
                                                          position = { line = r, character = c } }, 10000, buf)
  return got and got.result and got.result.contents.value or ""
end
obs.hover_before = hover_at(row, col)
local block_line
for i, l in ipairs(lines) do
  if l:find("^#define BLOCK") then
    block_line = i - 1
  end
end
obs.hover_tunable = hover_at(block_line, #"#define BLOCK ")
step("hover")

local function execute(command)
  local got = client:request_sync("workspace/executeCommand", { command = command, arguments = { uri, kernel } },
                                  30000, buf)
  return got and got.result
end

-- Optimize, then cancel it from its progress token once a best so far is reported
local res = execute("kerntune.optimize")
obs.optimize1 = res
local token = res.token
wait(30000, function()
  for _, p in ipairs(progress) do
    if p.token == token and p.kind == "report" and (p.message or ""):find("best %d") then
      return true
    end
  end
  return false
end, "a progress report with a best so far")
obs.lenses_running = lens_titles()
client:notify("window/workDoneProgress/cancel", { token = token })
wait(30000, function()
  for _, p in ipairs(progress) do
    if p.token == token and p.kind == "end" then
      obs.end1 = p.message
      return true
    end
  end
  return false
end, "the end of the cancelled session")
step("cancelled")

-- again, to the end
res = execute("kerntune.optimize")
obs.optimize2 = res
local token2 = res.token
wait(120000, function()
  for _, p in ipairs(progress) do
    if p.token == token2 and p.kind == "end" then
      obs.end2 = p.message
      return true
    end
  end
  return false
end, "the end of the second session")
obs.lenses_done = codelens_module_titles()
obs.hover_done = hover_at(row, col)
step("optimized")

-- Apply best: Neovim applies the workspace edit to the buffer and sends the change
obs.apply = execute("kerntune.applyBest")
wait(10000, function()
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
  return text:find("#define BLOCK 256", 1, true) ~= nil
end, "the applied text in the buffer")
obs.buffer_after = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
wait(10000, function()
  local t = lens_titles()
  return #t == 3 and t[3]:find("^Applied") ~= nil
end, "the Applied lens")
obs.lenses_applied = codelens_module_titles()
obs.tunables_after = 0
for _, d in ipairs(diags()) do
  if d.code == "tunable" then
    obs.tunables_after = obs.tunables_after + 1
  end
end
obs.hover_applied = hover_at(row, col)
obs.messages = messages
obs.progress = progress
step("applied")

client:stop()
wait(10000, function()
  return client:is_stopped()
end, "the server to stop")
step("stopped")
save()
