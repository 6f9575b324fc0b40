/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bring-up reference file (test/api/bringup-reference.txt) and its comparison with a
 * transcript of the device model's command trace (emu_mlx5_trace.h, transcript()).
 *
 * File format, one entry a line:
 *   # ...                  a comment line (also blank lines): ignored
 *   "  LINE   # why"       nicmr sends LINE, and so does the reference at this point
 *   "+ LINE   # why"       nicmr sends LINE, the reference does not: the comment says why
 *   "- LINE   # why"       the reference sends LINE, nicmr does not (yet): the comment says why
 * Every entry carries a comment (the rdma-core or kernel step for "  ", the reason for "+" and
 * "-"). nicmr's expected sequence is the "  " and "+" lines in order; the reference's own is
 * the "  " and "-" lines. A "-" line that nicmr starts to send, or a "+" line it stops
 * sending, is a difference the comparison reports: the file has to change with the driver.
 */
#ifndef NICMR_TEST_BRINGUP_REFERENCE_H
#define NICMR_TEST_BRINGUP_REFERENCE_H

#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

namespace nicmr::test {

struct RefEntry {
	int line = 0;  /* in the file, from 1 */
	char mark = 0; /* ' ', '+' or '-' */
	std::string text;
	std::string comment;
};

struct Reference {
	std::vector<RefEntry> entries;
	std::vector<std::string> errors; /* "line N: what is wrong" */

	/* What nicmr is expected to send: the "  " and "+" entries. */
	std::vector<const RefEntry *> expected() const
	{
		std::vector<const RefEntry *> v;
		for (const RefEntry &e : entries)
			if (e.mark != '-')
				v.push_back(&e);
		return v;
	}
};

inline std::string trim(const std::string &s)
{
	const size_t b = s.find_first_not_of(" \t");
	if (b == std::string::npos)
		return "";
	const size_t e = s.find_last_not_of(" \t");
	return s.substr(b, e - b + 1);
}

/* Parses the reference text (the file's contents). */
inline Reference parse_reference(const std::string &text)
{
	Reference r;
	size_t at = 0;
	int n = 0;
	while (at <= text.size()) {
		size_t nl = text.find('\n', at);
		if (nl == std::string::npos)
			nl = text.size();
		const std::string line = text.substr(at, nl - at);
		at = nl + 1;
		n++;
		if (trim(line).empty() || line[0] == '#')
			continue;
		auto err = [&](const std::string &what) {
			r.errors.push_back("line " + std::to_string(n) + ": " + what);
		};
		if (line.size() < 3 || (line[0] != ' ' && line[0] != '+' && line[0] != '-') ||
		    line[1] != ' ') {
			err("an entry starts with two spaces, '+ ' or '- '");
			continue;
		}
		RefEntry e;
		e.line = n;
		e.mark = line[0];
		const size_t hash = line.find('#', 2);
		e.text = trim(
			line.substr(2, hash == std::string::npos ? std::string::npos : hash - 2));
		if (hash != std::string::npos)
			e.comment = trim(line.substr(hash + 1));
		if (e.text.empty()) {
			err("no command");
			continue;
		}
		if (e.comment.empty()) {
			err(e.mark == ' ' ? "no comment naming the rdma-core or kernel step"
					  : "a difference without its reason");
			continue;
		}
		r.entries.push_back(std::move(e));
	}
	return r;
}

inline bool read_file(const std::string &path, std::string *out)
{
	std::ifstream f(path);
	if (!f)
		return false;
	out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
	return true;
}

/*
 * The differences between what nicmr was expected to send and what it sent, as lines of an
 * edit script over a longest common subsequence: "reference line N expects, not sent: X" and
 * "sent, not in the reference (after reference line N): X". Empty when they agree.
 */
inline std::vector<std::string> compare(const Reference &ref, const std::vector<std::string> &sent)
{
	const std::vector<const RefEntry *> want = ref.expected();
	const size_t a = want.size(), b = sent.size();
	std::vector<std::vector<unsigned>> lcs(a + 1, std::vector<unsigned>(b + 1, 0));
	for (size_t i = a; i-- > 0;)
		for (size_t j = b; j-- > 0;)
			lcs[i][j] = want[i]->text == sent[j]
					    ? lcs[i + 1][j + 1] + 1
					    : std::max(lcs[i + 1][j], lcs[i][j + 1]);
	std::vector<std::string> diff;
	size_t i = 0, j = 0;
	int last = 0;
	while (i < a || j < b) {
		if (i < a && j < b && want[i]->text == sent[j]) {
			last = want[i]->line;
			i++;
			j++;
		} else if (j < b && (i == a || lcs[i][j + 1] >= lcs[i + 1][j])) {
			diff.push_back("sent, not in the reference (after line " +
				       std::to_string(last) + "): " + sent[j]);
			j++;
		} else {
			diff.push_back("line " + std::to_string(want[i]->line) +
				       " expects it, not sent: " + want[i]->text);
			last = want[i]->line;
			i++;
		}
	}
	return diff;
}

} // namespace nicmr::test

#endif
