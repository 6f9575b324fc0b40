/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_cli.h"

#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

/* rdline_new and rdline_free are experimental in DPDK 22.11 (cmdline_rdline.h). */
#ifndef ALLOW_EXPERIMENTAL_API
#define ALLOW_EXPERIMENTAL_API
#endif
#include <cmdline.h>
#include <cmdline_parse.h>
#include <cmdline_rdline.h>

namespace nicmr::testmr {
namespace {

/*
 * A token of a completion instance. librte_cmdline hands the token header to its callbacks
 * (cmdline_parse.h, struct cmdline_token_ops), so the header comes first and the rest is
 * found from it.
 */
struct Token {
	cmdline_token_hdr hdr; /* first: the callbacks get &hdr */
	enum Kind { keyword, word } kind = word;
	std::vector<std::string> choices; /* keyword: its spellings; word: what Tab offers */
	std::string help;		  /* what '?' and Tab on an empty word show */
};

Token *token_of(cmdline_parse_token_hdr_t *tk)
{
	return reinterpret_cast<Token *>(tk);
}

/* The length of the word at buf, ended as librte_cmdline ends tokens (cmdline_parse.c,
 * cmdline_isendoftoken: blank, end of line, '#' or NUL). */
int word_len(const char *buf)
{
	int n = 0;
	while (!cmdline_isendoftoken(buf[n]))
		n++;
	return n;
}

/* parse(): how many characters the token takes, or -1. Used only to find which instances a
 * half-typed line matches: the lines themselves go to parse_command(). A keyword takes one of
 * its spellings; a parameter or option word takes any word, so that a value the parser would
 * refuse still lets Tab and '?' show what comes next (the parser says what is wrong). */
int token_parse(cmdline_parse_token_hdr_t *tk, const char *buf, void *, unsigned int)
{
	const Token *t = token_of(tk);
	const int n = word_len(buf);
	if (n == 0)
		return -1;
	if (t->kind == Token::word)
		return n;
	for (const auto &c : t->choices)
		if (c.size() == static_cast<size_t>(n) && std::strncmp(buf, c.data(), n) == 0)
			return n;
	return -1;
}

int token_complete_nb(cmdline_parse_token_hdr_t *tk)
{
	return static_cast<int>(token_of(tk)->choices.size());
}

int token_complete_elt(cmdline_parse_token_hdr_t *tk, int idx, char *dst, unsigned int size)
{
	const Token *t = token_of(tk);
	if (idx < 0 || static_cast<size_t>(idx) >= t->choices.size() || size == 0)
		return -1;
	std::snprintf(dst, size, "%s", t->choices[idx].c_str());
	return 0;
}

int token_help(cmdline_parse_token_hdr_t *tk, char *dst, unsigned int size)
{
	std::snprintf(dst, size, "%s", token_of(tk)->help.c_str());
	return 0;
}

cmdline_token_ops token_ops = {
	.parse = token_parse,
	.complete_get_nb = token_complete_nb,
	.complete_get_elt = token_complete_elt,
	.get_help = token_help,
};

std::vector<std::string> split_bar(std::string_view s)
{
	std::vector<std::string> out;
	while (true) {
		size_t bar = s.find('|');
		out.emplace_back(s.substr(0, bar));
		if (bar == std::string_view::npos)
			return out;
		s.remove_prefix(bar + 1);
	}
}

/*
 * The completion instances, one per command of the table: a token per keyword and parameter,
 * then as many option words as the options can take, each offering every option word and
 * choice (librte_cmdline has no optional tokens; completion only asks whether the words typed
 * so far match, so trailing tokens a line leaves out do no harm).
 */
class Instances {
public:
	Instances()
	{
		for (const CommandSpec &spec : command_table())
			add(spec);
		ctx_.push_back(nullptr);
	}
	~Instances()
	{
		for (cmdline_parse_inst_t *inst : ctx_)
			std::free(inst);
	}
	Instances(const Instances &) = delete;
	Instances &operator=(const Instances &) = delete;
	cmdline_parse_ctx_t *ctx() { return ctx_.data(); }

private:
	Token *new_token(Token::Kind kind, std::string help)
	{
		auto t = std::make_unique<Token>();
		t->hdr.ops = &token_ops;
		/* librte_cmdline writes a token's result at this offset; these write none. */
		t->hdr.offset = 0;
		t->kind = kind;
		t->help = std::move(help);
		tokens_.push_back(std::move(t));
		return tokens_.back().get();
	}

	void add(const CommandSpec &spec)
	{
		std::vector<Token *> toks;
		std::vector<std::string> option_choices;
		std::string options_help;
		size_t option_words = 0;
		const PatternItems items = pattern_items(spec.pattern);
		for (size_t n = 0; n < items.n; n++) {
			const PatternItem &it = items.it[n];
			if (it.kind == PatternItem::option ||
			    it.kind == PatternItem::optional_param) {
				options_help +=
					std::string(options_help.empty() ? "" : " ") + "[" +
					std::string(it.word) +
					(it.value.empty() ? "" : " " + std::string(it.value)) + "]";
				if (it.kind == PatternItem::optional_param) {
					/* An optional parameter: what its kind offers. */
					if (it.word == "SECTION") {
						for (const SectionSpec &s : section_table())
							option_choices.emplace_back(s.name);
						option_choices.emplace_back("all");
					}
				} else {
					option_choices.emplace_back(it.word);
				}
				option_words++;
				if (!it.value.empty()) {
					if (!is_param_name(it.value)) {
						for (auto &c : split_bar(it.value))
							option_choices.push_back(std::move(c));
					} else if (it.value == "ACCESS") {
						for (const char *name : mr_access_names())
							option_choices.emplace_back(name);
					}
					option_words++;
				}
				continue;
			}
			const std::string_view w = it.word;
			if (it.kind == PatternItem::param) {
				Token *t = new_token(Token::word,
						     std::string(w) + ": " + param_help(w));
				if (w == "ACCESS")
					for (const char *name : mr_access_names())
						t->choices.emplace_back(name);
				toks.push_back(t);
			} else {
				Token *t = new_token(Token::keyword, std::string(w));
				t->choices = split_bar(w);
				toks.push_back(t);
			}
		}
		for (size_t k = 0; k < option_words; k++) {
			Token *t = new_token(Token::word, "OPTION: " + options_help);
			t->choices = option_choices;
			toks.push_back(t);
		}
		help_.push_back(std::string(spec.pattern) + ": " + spec.help);
		auto *inst = static_cast<cmdline_parse_inst_t *>(std::calloc(
			1, sizeof(cmdline_parse_inst_t) + (toks.size() + 1) * sizeof(void *)));
		if (inst == nullptr)
			throw std::bad_alloc();
		/* No callback: librte_cmdline only completes with these instances; the lines run
		 * through Session::run_line. */
		inst->f = nullptr;
		inst->data = nullptr;
		inst->help_str = help_.back().c_str();
		for (size_t k = 0; k < toks.size(); k++)
			inst->tokens[k] = &toks[k]->hdr;
		ctx_.push_back(inst);
	}

	std::vector<std::unique_ptr<Token>> tokens_;
	/* A deque: each instance points at its help string, which must not move. */
	std::deque<std::string> help_;
	std::vector<cmdline_parse_inst_t *> ctx_;
};

constexpr const char *kPrompt = "testmr> ";

struct Prompt {
	Session *session = nullptr;
	cmdline *cl = nullptr; /* the completion context only (it writes nowhere) */
	int rc = 0;
};

int write_char(rdline *, char c)
{
	return static_cast<int>(write(STDOUT_FILENO, &c, 1));
}

/* A validated line: through the parser every input uses. */
void validate(rdline *rdl, const char *buf, unsigned int)
{
	auto *p = static_cast<Prompt *>(rdline_get_opaque(rdl));
	std::string line(buf);
	while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
		line.pop_back();
	/* A failed command at the prompt does not end the session, but it is remembered for the
	 * exit status as from -c or -f. */
	if (int r = p->session->run_line(line); r != 0)
		p->rc = r;
	std::fflush(stdout);
	if (p->session->quit_requested())
		rdline_quit(rdl);
}

int complete(rdline *rdl, const char *buf, char *dst, unsigned int size, int *state)
{
	auto *p = static_cast<Prompt *>(rdline_get_opaque(rdl));
	return cmdline_complete(p->cl, buf, state, dst, size);
}

/* The terminal without line buffering, echo and signals, as librte_cmdline's own stdin prompt
 * sets it (cmdline_stdin_new), restored at the end. */
class RawTerminal {
public:
	RawTerminal()
	{
		if (tcgetattr(STDIN_FILENO, &old_) != 0)
			return;
		termios t = old_;
		t.c_lflag &= ~(ICANON | ECHO | ISIG);
		ok_ = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
	}
	~RawTerminal()
	{
		if (ok_)
			tcsetattr(STDIN_FILENO, TCSANOW, &old_);
	}
	RawTerminal(const RawTerminal &) = delete;
	RawTerminal &operator=(const RawTerminal &) = delete;
	bool ok() const noexcept { return ok_; }

private:
	termios old_{};
	bool ok_ = false;
};

} // namespace

int run_prompt(Session &session)
{
	if (isatty(STDIN_FILENO) == 0)
		return -ENOTTY;
	Instances instances;
	Prompt p;
	p.session = &session;
	/* librte_cmdline works without rte_eal_init: cmdline_new, cmdline_complete and rdline
	 * touch no EAL state (lib/cmdline depends on EAL only for rte_string_fns). */
	p.cl = cmdline_new(instances.ctx(), kPrompt, -1, -1);
	rdline *rdl = p.cl != nullptr ? rdline_new(write_char, validate, complete, &p) : nullptr;
	if (rdl == nullptr) {
		std::fprintf(stderr, "testmr: the line editor (librte_cmdline) did not start\n");
		cmdline_free(p.cl);
		return -ENOMEM;
	}
	RawTerminal raw;
	std::fflush(stdout);
	rdline_newline(rdl, kPrompt);
	char c;
	while (!session.quit_requested() && read(STDIN_FILENO, &c, 1) == 1) {
		int r = rdline_char_in(rdl, c);
		if (r == RDLINE_RES_VALIDATED) {
			/* History as librte_cmdline's cmdline_in keeps it: not empty, and not
			 * the line just before again. */
			const char *line = rdline_get_buffer(rdl);
			const char *last = rdline_get_history_item(rdl, 0);
			const size_t len = std::strlen(line);
			const bool same = last != nullptr &&
					  std::strncmp(line, last, len - 1) == 0 &&
					  std::strlen(last) == len - 1;
			if (len > 1 && !same)
				rdline_add_history(rdl, line);
			if (session.quit_requested())
				break;
			rdline_newline(rdl, kPrompt);
		} else if (r == RDLINE_RES_EOF || r == RDLINE_RES_EXITED) {
			break;
		}
	}
	write_char(rdl, '\n');
	rdline_free(rdl);
	cmdline_free(p.cl);
	return p.rc;
}

} // namespace nicmr::testmr
